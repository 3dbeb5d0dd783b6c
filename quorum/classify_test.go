package quorum_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/memdlock"
)

var errRefused = errors.New("WRONGPASS invalid username-password pair")

// classifyingNode is a node whose driver calls errRefused permanent.
type classifyingNode struct{ *node }

func (classifyingNode) Permanent(err error) bool { return errors.Is(err, errRefused) }

// refusing returns a node that fails every call with err.
func refusing(err error) classifyingNode {
	fail := func() error { return fmt.Errorf("node: %w", err) }
	return classifyingNode{&node{
		Driver:  memdlock.New(),
		acquire: func(context.Context, driver.Request) (driver.Result, error) { return driver.Result{}, fail() },
		refresh: func(context.Context, driver.Request) error { return fail() },
		release: func(context.Context, driver.Request) error { return fail() },
	}}
}

// TestPermanentNeedsMajority checks that a quorum's failure is permanent
// only when so many nodes failed permanently that no majority can form,
// and that a Lock then ends at once.
func TestPermanentNeedsMajority(t *testing.T) {
	untrusted := x509.UnknownAuthorityError{}
	good := func() driver.Driver { return memdlock.New() }
	for _, tc := range []struct {
		name  string
		nodes func() []driver.Driver
		want  bool
	}{
		{"two of three refuse", func() []driver.Driver {
			return []driver.Driver{refusing(errRefused), refusing(errRefused), good()}
		}, true},
		{"two of three, one untrusted certificate", func() []driver.Driver {
			return []driver.Driver{refusing(untrusted), refusing(errRefused), good()}
		}, true},
		{"one of three refuses, one is down", func() []driver.Driver {
			return []driver.Driver{refusing(errRefused), down(), good()}
		}, false},
		{"two of five refuse, one is down", func() []driver.Driver {
			return []driver.Driver{refusing(errRefused), refusing(errRefused), down(), down(), good()}
		}, false},
		{"three of five refuse", func() []driver.Driver {
			return []driver.Driver{refusing(errRefused), refusing(untrusted), refusing(errRefused), down(), good()}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newQuorum(t, tc.nodes())
			ctx := context.Background()
			// Each key orders the nodes differently (see the lead of a
			// key): the outcome must not depend on which answers first.
			for i := range 16 {
				_, err := q.Acquire(ctx, driver.Request{Key: fmt.Sprintf("%s/%d", key(t), i), Owner: "o", TTL: time.Second})
				if err == nil {
					t.Fatal("Acquire succeeded")
				}
				if got := q.Permanent(err); got != tc.want {
					t.Fatalf("Permanent(%v) = %v; want %v", err, got, tc.want)
				}
			}
			if !tc.want {
				return
			}
			c, err := dlock.New(q)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			wctx, cancel := context.WithTimeout(ctx, time.Hour)
			defer cancel()
			_, err = c.Lock(wctx, key(t))
			if wctx.Err() != nil || !errors.Is(err, dlock.ErrPermanent) {
				t.Errorf("Lock = %v (context: %v); want ErrPermanent before the context ends", err, wctx.Err())
			}
		})
	}
}
