package integration_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/redisdlock"
)

// TestErrorsNameKeyOnce is the case of package dlock's
// TestErrorsNameKeyOnce that needs a backend: the errors of a store that is
// down name the key once and wrap ErrUnavailable.
func TestErrorsNameKeyOnce(t *testing.T) {
	const key = "order:42"
	ctx := context.Background()
	check := func(t *testing.T, what string, err error, targets ...error) {
		t.Helper()
		dlocktest.ErrorNamesKeyOnce(t, what, key, err, targets...)
	}
	t.Run("unreachable redis", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
		defer rc.Close()
		d, err := redisdlock.New(rc)
		if err != nil {
			t.Fatal(err)
		}
		c := newClient(t, d)
		_, err = c.TryLock(ctx, key)
		check(t, "TryLock on a Redis that is down", err, dlock.ErrUnavailable)
		_, err = c.Lock(ctx, key)
		check(t, "Lock on a Redis that is down", err, dlock.ErrUnavailable)
	})
}
