package dlocktest

import (
	"context"
	"crypto/x509"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
)

// EditURL returns raw with its scheme and host name replaced (where scheme
// or host is not empty; the port is kept) and the query parameters kv
// (name, value, name, value...) set, or removed where the value is empty.
func EditURL(t testing.TB, raw, scheme, host string, kv ...string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if scheme != "" {
		u.Scheme = scheme
	}
	if host != "" {
		u.Host = host + ":" + u.Port()
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			q.Del(kv[i])
		} else {
			q.Set(kv[i], kv[i+1])
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// LockTwice opens a Client from raw, takes and releases a lock twice, and
// checks that the fencing tokens increase.
func LockTwice(t testing.TB, raw string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := dlock.Open(ctx, raw)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer c.Close()
	var last uint64
	for i := range 2 {
		l, err := c.TryLock(ctx, "tls-key", dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatalf("TryLock %d: %v", i, err)
		}
		if l.Token() <= last {
			t.Errorf("token %d after %d; want an increasing fencing token", l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release %d: %v", i, err)
		}
	}
}

// OpenFails opens raw, which must fail by itself (not by running into the
// context's deadline of a minute) without quoting secret (unless it is
// empty), and returns the error.
func OpenFails(t testing.TB, raw, secret string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := dlock.Open(ctx, raw)
	if err == nil {
		c.Close()
		t.Fatalf("Open(%s) succeeded, want an error", raw)
	}
	t.Logf("Open: %v", err)
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("Open ran into its deadline instead of failing: %v", err)
	}
	if secret != "" && strings.Contains(err.Error(), secret) {
		t.Errorf("the error quotes the password: %v", err)
	}
	return err
}

// WantUnknownAuthority checks that err is a certificate verification error
// naming an unknown authority.
func WantUnknownAuthority(t testing.TB, err error) {
	t.Helper()
	var ua x509.UnknownAuthorityError
	if !errors.As(err, &ua) || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("error %q (%T); want an x509 unknown authority error", err, err)
	}
}
