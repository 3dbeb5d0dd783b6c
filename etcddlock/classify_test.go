package etcddlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

func TestPermanentClassifies(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("etcddlock: acquire %q: %w", "k", err) }
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{rpctypes.ErrAuthFailed, true},
		{rpctypes.ErrGRPCAuthFailed, true},
		{rpctypes.ErrPermissionDenied, true},
		{rpctypes.ErrGRPCPermissionDenied, true},
		{rpctypes.ErrUserEmpty, true},
		{rpctypes.ErrAuthNotEnabled, true},
		{rpctypes.ErrInvalidAuthToken, false},
		{rpctypes.ErrGRPCInvalidAuthToken, false},
		{rpctypes.ErrNoLeader, false},
		{rpctypes.ErrGRPCNoLeader, false},
		{rpctypes.ErrTimeout, false},
		{context.DeadlineExceeded, false},
		{errors.New("etcdserver: authentication failed, invalid user ID or password"), false},
	} {
		if got := permanent(wrap(tc.err)); got != tc.want {
			t.Errorf("permanent(%v) = %v; want %v", tc.err, got, tc.want)
		}
	}
}

// signalling is a real driver that closes held when an Acquire first
// finds the key held.
type signalling struct {
	*Driver
	once sync.Once
	held chan struct{}
}

func (s *signalling) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	res, err := s.Driver.Acquire(ctx, req)
	if err == nil && !res.Acquired {
		s.once.Do(func() { close(s.held) })
	}
	return res, err
}

// TestWaitEndsOnRevokedPermission checks that a Lock that waits for a
// held key ends at once when the cluster revokes the user's permission
// on the lock's keys.
func TestWaitEndsOnRevokedPermission(t *testing.T) {
	ctx := context.Background()
	srv, err := testsrv.StartEtcd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	end := clientv3.GetPrefixRangeEnd(DefaultPrefix)
	setup := newClient(t, srv.Addr)
	for _, step := range []func() error{
		func() error { _, err := setup.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := setup.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := setup.RoleAdd(ctx, "locker"); return err },
		func() error {
			_, err := setup.RoleGrantPermission(ctx, "locker", DefaultPrefix, end, clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := setup.UserAdd(ctx, "u", "upw"); return err },
		func() error { _, err := setup.UserGrantRole(ctx, "u", "locker"); return err },
		func() error { _, err := setup.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	setup.Close()
	login := func(user, password string) *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Addr}, DialTimeout: 5 * time.Second,
			Logger: zap.NewNop(), Username: user, Password: password})
		if err != nil {
			t.Fatal(err)
		}
		return cli
	}
	admin := login("root", "rootpw")
	defer admin.Close()
	open := func() *Driver {
		d, err := newDriver(login("u", "upw"), true, nil)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	holder, err := dlock.New(open())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	w := &signalling{Driver: open(), held: make(chan struct{})}
	waiter, err := dlock.New(w)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	if _, err := holder.Lock(ctx, "k", dlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(wctx, "k", dlock.WithBackoff(time.Millisecond, 50*time.Millisecond))
		if err == nil {
			l.Release(ctx)
		}
		done <- err
	}()
	<-w.held
	if _, err := admin.RoleRevokePermission(ctx, "locker", DefaultPrefix, end); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if wctx.Err() != nil {
		t.Fatalf("the wait ran until its context ended: %v", err)
	}
	if !errors.Is(err, dlock.ErrPermanent) || !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("Lock = %v; want ErrPermanent wrapping etcd's permission denied", err)
	}
}
