package sqldlock_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	. "github.com/dlockhq/dlock/sqldlock"
)

// silentServer listens on a loopback port and accepts connections that it
// holds open and never writes to, as a server that hangs after accept does.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// openWithin opens raw with ctx and fails the test unless the open fails
// within limit.
func openWithin(t *testing.T, ctx context.Context, raw string, limit time.Duration) error {
	t.Helper()
	type result struct {
		d   *Driver
		err error
	}
	ch := make(chan result, 1)
	start := time.Now()
	go func() {
		d, err := openURL(ctx, raw)
		ch <- result{d, err}
	}()
	select {
	case r := <-ch:
		if r.err == nil {
			r.d.Close()
			t.Fatalf("open %s succeeded against a silent server", raw)
		}
		t.Logf("open failed after %v: %v", time.Since(start).Round(time.Millisecond), r.err)
		return r.err
	case <-time.After(limit):
		t.Fatalf("open %s still running after %v against a server that never answers", raw, limit)
	}
	return nil
}

// isTimeout reports whether err says that a timeout or deadline ended the
// open.
func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "timeout")
}

// TestOpenSilentServer checks that opening a PostgreSQL or MySQL URL whose
// server accepts connections and never answers fails within the default
// connect timeout, or the URL's, or the caller's deadline, whichever comes
// first, with an error that says so.
func TestOpenSilentServer(t *testing.T) {
	for _, c := range []struct {
		name, url, short string
	}{
		{"postgres", "postgres://u@%s/db?sslmode=disable", "connect_timeout=1"},
		{"postgres-prefer", "postgres://u@%s/db", "connect_timeout=1"},
		{"mysql", "mysql://u@%s/db", "timeout=1s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			raw := strings.Replace(c.url, "%s", silentServer(t), 1)
			t.Run("default", func(t *testing.T) {
				t.Parallel()
				err := openWithin(t, context.Background(), raw, 10*time.Second) // the dialects' connect timeout, 5s, and 5s more
				if !isTimeout(err) {
					t.Errorf("error %v names no timeout", err)
				}
			})
			t.Run("url", func(t *testing.T) {
				t.Parallel()
				sep := "?"
				if strings.Contains(raw, "?") {
					sep = "&"
				}
				err := openWithin(t, context.Background(), raw+sep+c.short, 4*time.Second)
				if !isTimeout(err) {
					t.Errorf("error %v names no timeout", err)
				}
			})
			t.Run("ctx", func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				err := openWithin(t, ctx, raw, 3*time.Second)
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("error %v does not wrap context.DeadlineExceeded", err)
				}
			})
		})
	}
}

// closingServer listens on a loopback port and closes every connection at
// once.
func closingServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

// recordHandler keeps the messages of the slog records it handles.
type recordHandler struct {
	mu   sync.Mutex
	msgs []string
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordHandler) WithGroup(string) slog.Handler            { return h }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.Level == slog.LevelDebug {
		h.msgs = append(h.msgs, r.Message)
	}
	return nil
}

// TestMySQLLogsToSlog checks that what go-sql-driver/mysql logs about a
// connection (here: one the server closes during the handshake) goes to
// slog at debug level, not to its own logger, which writes to stderr.
func TestMySQLLogsToSlog(t *testing.T) {
	h := &recordHandler{}
	old := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(old) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if d, err := openURL(ctx, "mysql://u@"+closingServer(t)+"/db"); err == nil {
		d.Close()
		t.Fatal("open succeeded against a server that closes every connection")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.msgs {
		if strings.HasPrefix(m, "go-sql-driver/mysql: ") {
			return
		}
	}
	t.Errorf("no debug record from go-sql-driver/mysql; got %q", h.msgs)
}

// TestBounds checks that the largest semaphore limit and lease the driver
// declares work on the database, and that larger ones are refused with a
// *dlock.ArgError before any statement runs.
func TestBounds(t *testing.T) {
	forEach(t, func(t *testing.T, s store) {
		c, err := dlock.New(s.open(t))
		if err != nil {
			t.Fatal(err)
		}
		caps := c.Driver().Capabilities()
		if caps.MaxLimit != math.MaxInt32 || caps.MaxTTL != dlock.DefaultMaxTTL {
			t.Errorf("MaxLimit, MaxTTL = %d, %v; want %d, %v", caps.MaxLimit, caps.MaxTTL, math.MaxInt32, dlock.DefaultMaxTTL)
		}
		ctx := tctx(t)
		var ae *dlock.ArgError
		if _, err := c.TryLock(ctx, "sem", dlock.WithLimit(1<<31)); !errors.As(err, &ae) {
			t.Errorf("TryLock with limit 1<<31 = %v; want a *dlock.ArgError", err)
		}
		if _, err := c.TryLock(ctx, "long", dlock.WithTTL(caps.MaxTTL+time.Second)); !errors.As(err, &ae) {
			t.Errorf("TryLock with TTL %v = %v; want a *dlock.ArgError", caps.MaxTTL+time.Second, err)
		}
		if _, err := c.TryLock(ctx, "huge", dlock.WithTTL(math.MaxInt64)); !errors.As(err, &ae) {
			t.Errorf("TryLock with TTL %v = %v; want a *dlock.ArgError", time.Duration(math.MaxInt64), err)
		}
		sem, err := c.TryLock(ctx, "sem", dlock.WithLimit(caps.MaxLimit), dlock.WithoutRenewal())
		if err != nil {
			t.Fatalf("TryLock with limit %d: %v", caps.MaxLimit, err)
		}
		long, err := c.TryLock(ctx, "long", dlock.WithTTL(caps.MaxTTL), dlock.WithoutRenewal())
		if err != nil {
			t.Fatalf("TryLock with TTL %v: %v", caps.MaxTTL, err)
		}
		if err := long.Refresh(ctx); err != nil {
			t.Errorf("Refresh with TTL %v: %v", caps.MaxTTL, err)
		}
		hs, err := c.List(ctx, "")
		if err != nil || len(hs) != 2 {
			t.Fatalf("List = %v, %v; want 2 holders", hs, err)
		}
		for _, h := range hs {
			if h.Key == "long" && h.TTL < caps.MaxTTL-time.Minute {
				t.Errorf("lease of %q = %v; want about %v", h.Key, h.TTL, caps.MaxTTL)
			}
			if h.Key == "sem" && h.Limit != caps.MaxLimit {
				t.Errorf("limit of %q = %d; want %d", h.Key, h.Limit, caps.MaxLimit)
			}
		}
		for _, l := range []*dlock.Lock{sem, long} {
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release %q: %v", l.Key(), err)
			}
		}
	})
}

// TestHungDriver checks the conformance suite's hung drivers: once the
// server hangs, a call returns soon after its context ends, and Close
// returns within a bound.
func TestHungDriver(t *testing.T) {
	for _, d := range []Dialect{Postgres, MySQL} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			s := newStore(t, d)
			for _, m := range driverModes {
				t.Run("mode"+m.suffix, func(t *testing.T) {
					drv, hang := s.hungDriver(m.params...)(t)
					r := req("k"+m.suffix, time.Minute)
					mustAcquire(t, drv, r)
					if d == Postgres {
						// PostgreSQL's listener connection, which
						// Close must stop too.
						sub, err := drv.(driver.Notifier).Subscribe(tctx(t), req("k", time.Minute))
						if err != nil {
							t.Fatal(err)
						}
						defer sub.Close()
					}
					hang()
					ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
					defer cancel()
					done := make(chan error, 1)
					go func() { done <- drv.Refresh(ctx, r) }()
					select {
					case err := <-done:
						if err == nil {
							t.Error("Refresh on a hung server succeeded")
						}
					case <-time.After(10 * time.Second):
						t.Fatal("Refresh on a hung server still running 10s after its context ended")
					}
					closed := make(chan error, 1)
					go func() { closed <- drv.Close() }()
					select {
					case <-closed:
					case <-time.After(15 * time.Second):
						t.Fatal("Close of a driver over a hung server still running after 15s")
					}
				})
			}
		})
	}
}

// TestErrorsHidePasswords checks that no error of an open shows a password,
// whether in the URL's userinfo or in a password= parameter.
func TestErrorsHidePasswords(t *testing.T) {
	const secret = "s3cr3tPW"
	// A port nothing listens on: the connection is refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for _, raw := range []string{
		"postgres://u@" + addr + "/db?sslmode=disable&password=" + secret,
		"postgres://u@" + addr + "/db?password=" + secret,
		"postgresql://u:" + secret + "@" + addr + "/db?sslmode=disable",
		"postgres://u@" + addr + "/db?password=" + secret + "&connect_timeout=soon",
		"postgres://u@" + addr + "/db?password=" + secret + "&fair=maybe",
		"postgres://u@" + addr + "/db?password=" + secret + "&sslmode=bogus",
		"mysql://u:" + secret + "@" + addr + "/db",
		"mysql://u:" + secret + "@" + addr + "/db?timeout=soon",
		"mysql://u:" + secret + "@" + addr + "/db?fair=maybe",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		d, err := openURL(ctx, raw)
		cancel()
		if err == nil {
			d.Close()
			t.Errorf("open %s succeeded", raw)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("open with a password: error shows it: %v", err)
		}
	}
}

// TestSlowContenderCannotStealRenewal checks that a client whose every
// round trip is slow (550ms each way, through a delaying proxy, against a
// lease of 1s) cannot
// make a healthy holder lose its lock by trying to acquire the same key: no
// acquire keeps a row or lock of the key across its round trips, so the
// holder's renewal never waits behind it.
func TestSlowContenderCannotStealRenewal(t *testing.T) {
	const (
		// A round trip of the contender outlasts the holder's lease,
		// with room for a loaded machine's pauses in the holder's
		// renewals.
		ttl   = time.Second
		delay = 550 * time.Millisecond
		span  = 3 * ttl
	)
	for _, d := range []Dialect{Postgres, MySQL} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			s := newStore(t, d)
			for _, m := range driverModes {
				t.Run("mode"+m.suffix, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
					defer cancel()
					key := "slow" + m.suffix
					holder, err := dlock.New(s.open(t, m.params...))
					if err != nil {
						t.Fatal(err)
					}
					defer holder.Close()
					raw, _ := s.viaProxy(t, delay, m.params...)
					octx, cancel := context.WithTimeout(ctx, 30*time.Second)
					sd, err := openURL(octx, raw)
					cancel()
					if err != nil {
						t.Fatal(err)
					}
					defer sd.Close()
					// Connect and check the schema before the race.
					if _, err := sd.Count(ctx, key); err != nil {
						t.Fatal(err)
					}
					l, err := holder.Lock(ctx, key, dlock.WithTTL(ttl))
					if err != nil {
						t.Fatal(err)
					}
					// The contender asks as a waiting Lock call does
					// (Request.Queue), and as TryLock does, each call
					// to its end.
					end := time.Now().Add(span)
					r := req(key, ttl)
					for i := 0; (i < 3 || time.Now().Before(end)) && l.Context().Err() == nil; i++ {
						r.Queue = i%3 != 2
						start := time.Now()
						res, err := sd.Acquire(ctx, r)
						t.Logf("slow Acquire (queue %v) took %v: %+v, %v", r.Queue, time.Since(start).Round(time.Millisecond), res, err)
						if errors.Is(err, driver.ErrNotOwner) && r.Queue {
							// Its queue entry lapsed between two slow
							// calls: it leaves the queue, as dlock has
							// it do, and comes back as a new owner.
							if err := sd.Release(ctx, r); err != nil && !errors.Is(err, driver.ErrNotOwner) {
								t.Fatalf("slow Release: %v", err)
							}
							r = req(key, ttl)
							continue
						}
						if err != nil {
							t.Fatalf("slow Acquire: %v", err)
						}
						if res.Acquired {
							t.Fatalf("the slow client acquired %q while it was held", key)
						}
					}
					if err := l.Context().Err(); err != nil {
						t.Fatalf("the holder lost its lock to a slow contender: %v (%v)", err, l.Cause())
					}
					if err := l.Release(ctx); err != nil {
						t.Fatalf("Release: %v", err)
					}
					// The slow client leaves the queue; the key must be
					// free.
					if err := sd.Release(ctx, r); err != nil && !errors.Is(err, driver.ErrNotOwner) {
						t.Errorf("slow Release: %v", err)
					}
					nl, err := holder.TryLock(ctx, key, dlock.WithTTL(ttl))
					if err != nil {
						t.Fatalf("TryLock after the holder's release: %v", err)
					}
					if nl.Token() <= l.Token() {
						t.Errorf("token after release %d <= %d", nl.Token(), l.Token())
					}
					nl.Release(ctx)
				})
			}
		})
	}
}
