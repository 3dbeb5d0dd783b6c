// Package bounds holds what the tables of hostile input of the public
// packages share: the stores they run on (the in-process store, SQLite, and
// memcached for its lease clock of whole seconds), the values every duration
// and count option is tried with, and the checks that an error is typed and
// that nothing is left held on the store.
package bounds

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	_ "github.com/dlockhq/dlock/memcachedlock"
	_ "github.com/dlockhq/dlock/memdlock"
	_ "github.com/dlockhq/dlock/sqldlock/sqlite"
)

// Stores are the stores the tables run on. memcached must have been started
// by the package's TestMain (testsrv.Memcached).
var Stores = []dlocktest.Store{
	{Name: "mem", URL: func(t *testing.T) string { return "mem://" + testsrv.DatabaseName(t.Name()) }},
	{Name: "sqlite", URL: func(t *testing.T) string { return dlock.SQLiteURL(filepath.Join(t.TempDir(), "locks.db")) }},
	{Name: "memcached", URL: func(t *testing.T) string {
		return testsrv.Get(t, testsrv.Memcached).URL + "?prefix=" + testsrv.DatabaseName(t.Name()) + ":"
	}},
}

// Durations returns the values a duration option is tried with: 0, -1, the
// largest time.Duration, the store's largest accepted value most, and
// most+1.
func Durations(most time.Duration) []time.Duration {
	return []time.Duration{0, -1, math.MaxInt64, most, most + 1}
}

// Counts returns the values a count option is tried with, as Durations.
func Counts(most int) []int { return []int{0, -1, math.MaxInt64, most, most + 1} }

// NilContext is a nil context.Context, for the tests that check a nil one
// is refused: passed as a variable, it is no literal nil for linters to
// report.
var NilContext context.Context

// Sentinels are the sentinel errors of package dlock that an error may wrap
// to count as typed.
var Sentinels = []error{
	dlock.ErrInvalidArgument, dlock.ErrNotAcquired, dlock.ErrNotHeld, dlock.ErrLost,
	dlock.ErrClosed, dlock.ErrUnsupported, dlock.ErrModeMismatch, dlock.ErrUnavailable, dlock.ErrPermanent,
}

// WantArg fails the test unless err is an *dlock.ArgError named name.
func WantArg(t *testing.T, err error, name string) {
	t.Helper()
	if ae := (*dlock.ArgError)(nil); !errors.As(err, &ae) || ae.Name != name {
		t.Errorf("error %v; want an *ArgError for %q", err, name)
	}
}

// WantTyped fails the test unless err is nil, an *dlock.ArgError, or wraps
// one of Sentinels or of more (a package's own sentinels).
func WantTyped(t *testing.T, err error, more ...error) {
	t.Helper()
	if err == nil || errors.As(err, new(*dlock.ArgError)) {
		return
	}
	for _, s := range append(more, Sentinels...) {
		if errors.Is(err, s) {
			return
		}
	}
	t.Errorf("error %v (%T) wraps no documented sentinel", err, err)
}

// NothingHeld fails the test unless none of keys is held on c's store:
// where the store lists holders none is listed, and c takes each key at
// once as an exclusive lock (which a hold of any mode left behind would
// refuse) and releases it.
func NothingHeld(t *testing.T, c *dlock.Client, keys ...string) {
	t.Helper()
	ctx := dlocktest.Ctx(t)
	for _, key := range keys {
		hs, err := c.List(ctx, key)
		switch {
		case errors.Is(err, dlock.ErrUnsupported):
		case err != nil:
			t.Errorf("List(%q): %v", key, err)
		default:
			for _, h := range hs {
				if h.Key == key {
					t.Errorf("%q is held: %+v", key, h)
				}
			}
		}
		l, err := c.TryLock(ctx, key)
		if err != nil {
			t.Errorf("%q is held: TryLock = %v", key, err)
			continue
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release(%q): %v", key, err)
		}
	}
}

// Panics runs fn on a goroutine of its own and returns once it has ended;
// fn must panic, or call runtime.Goexit if goexit.
func Panics(t *testing.T, goexit bool, fn func()) {
	t.Helper()
	ended := make(chan any)
	go func() {
		returned := false
		defer func() {
			r := recover()
			if r == nil && !returned {
				r = "Goexit"
			}
			ended <- r
		}()
		fn()
		returned = true
	}()
	switch r := <-ended; {
	case goexit && r != "Goexit":
		t.Errorf("the function ended with %v; want runtime.Goexit", r)
	case !goexit && (r == nil || r == "Goexit"):
		t.Errorf("the function ended with %v; want a panic", r)
	}
}
