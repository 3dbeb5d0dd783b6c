package cli_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/cmd/dlock/internal/cli"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testcert"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/internal/urlutil"
)

// listeners are the servers of TestOpenNeverHangs: a port where nothing
// listens, one that accepts connections and never answers, and one that
// speaks TLS only.
type listeners struct {
	closed, silent, tls string
	certs               *testcert.Set
}

func startListeners(t *testing.T) *listeners {
	t.Helper()
	certs, err := testcert.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l := &listeners{certs: certs}
	c, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.closed = c.Addr().String()
	c.Close()
	pair, err := tls.LoadX509KeyPair(certs.ServerCert, certs.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg  sync.WaitGroup
		lns []net.Listener
	)
	t.Cleanup(func() {
		for _, ln := range lns {
			ln.Close()
		}
		wg.Wait()
	})
	serve := func(ln net.Listener, handle func(net.Conn)) string {
		lns = append(lns, ln)
		var conns []net.Conn
		wg.Go(func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					for _, c := range conns {
						c.Close()
					}
					return
				}
				conns = append(conns, c)
				wg.Go(func() { handle(c) })
			}
		})
		return ln.Addr().String()
	}
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.silent = serve(silent, func(c net.Conn) { c.Read(make([]byte, 1<<16)) }) // reads, never answers
	tl, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	l.tls = serve(tl, func(c net.Conn) {
		defer c.Close()
		if c.(*tls.Conn).Handshake() == nil {
			c.Read(make([]byte, 1<<16))
		}
	})
	return l
}

// openResult opens raw, guarded by a generous timer, and returns its
// error; the test fails if Open succeeds or does not return.
func openResult(t *testing.T, raw string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		c, err := dlock.Open(context.Background(), raw) // no deadline: Open bounds itself
		if c != nil {
			c.Close()
			err = errors.New("Open succeeded")
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Logf("Open(%s): %v", raw, err)
		return err
	case <-time.After(2 * time.Minute):
		t.Fatalf("Open(%s) hangs", raw)
		return nil
	}
}

// timedOut reports whether err says that the store did not answer in time.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, urlutil.ErrConnectTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// TestOpenNeverHangs opens every backend, without a deadline, on a closed
// port, on a server that never answers, with TLS on a server that does not
// speak it and without TLS on one that speaks only TLS: each Open returns
// with ErrUnavailable and the likely cause.
func TestOpenNeverHangs(t *testing.T) {
	l := startListeners(t)
	ca := "cacert=" + l.certs.CA
	backends := []struct {
		name, plain, tls string // URLs, %s for host:port; no tls URL where the backend has no TLS
		inProtocol       bool   // TLS starts inside the store's protocol: no TLS port to diagnose
	}{
		{"redis", "redis://%s", "rediss://%s?" + ca, false},
		{"sentinel", "redis+sentinel://%s/mymaster", "redis+sentinel://%s/mymaster?" + ca, false},
		{"cluster", "redis+cluster://%s", "redis+cluster://%s?" + ca, false},
		{"redlock", "redlock://%s", "redlocks://%s?" + ca, false},
		{"etcd", "etcd://%s", "etcd://%s?" + ca, false},
		{"zk", "zk://%s", "zk://%s?" + ca, false},
		{"postgres", "postgres://u:p@%s/db?sslmode=disable", "postgres://u:p@%s/db?sslmode=verify-full&sslrootcert=" + l.certs.CA, true},
		{"mysql", "mysql://u:p@%s/db?insecure_auth=true", "mysql://u:p@%s/db?" + ca, true},
		{"memcached", "memcached://%s", "", false},
	}
	// short sets a connect timeout of 1s where the case is not about Open's
	// default bound, which "no answer" checks on every backend.
	short := func(raw string) string {
		sep, d := "?", "1s"
		if strings.Contains(raw, "?") {
			sep = "&"
		}
		if strings.HasPrefix(raw, "postgres") {
			d = "1" // seconds, as libpq says
		}
		return raw + sep + "connect_timeout=" + d
	}
	for _, b := range backends {
		cases := []struct {
			name, url string
			check     func(err error) string // what is wrong with err, or ""
		}{
			{"port closed", short(fmt.Sprintf(b.plain, l.closed)), func(err error) string {
				if !errors.Is(err, syscall.ECONNREFUSED) {
					return "want the refused connection named"
				}
				return ""
			}},
			{"no answer", fmt.Sprintf(b.plain, l.silent), func(err error) string {
				if !timedOut(err) {
					return "want a timeout"
				}
				return ""
			}},
			{"TLS client, plain port", short(fmt.Sprintf(b.tls, l.silent)), func(err error) string {
				if b.inProtocol && !timedOut(err) {
					return "want a timeout"
				}
				if !b.inProtocol && !errors.Is(err, urlutil.ErrNoTLSAnswer) {
					return "want urlutil.ErrNoTLSAnswer"
				}
				return ""
			}},
			{"plain client, TLS port", short(fmt.Sprintf(b.plain, l.tls)), func(err error) string {
				if !b.inProtocol && !errors.Is(err, urlutil.ErrTLSAnswer) {
					return "want urlutil.ErrTLSAnswer"
				}
				return ""
			}},
		}
		for _, c := range cases {
			if strings.HasPrefix(c.url, "%!") {
				continue // no TLS URL
			}
			t.Run(b.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				err := openResult(t, c.url)
				switch {
				case !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrPermanent) || errors.Is(err, dlock.ErrInvalidArgument):
					t.Errorf("Open: %v; want ErrUnavailable only", err)
				case c.check(err) != "":
					t.Errorf("Open: %v; %s", err, c.check(err))
				}
			})
		}
	}
}

// TestOpenTLSMismatchRealServers opens real Redis and etcd servers with
// the wrong TLS setting: TLS on a plain server, none on a TLS-only one.
func TestOpenTLSMismatchRealServers(t *testing.T) {
	ctx := context.Background()
	certs, err := testcert.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	plain, err := testsrv.StartRedis(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Stop()
	secure, err := testsrv.StartRedisTLS(ctx, testsrv.RedisTLS{Certs: certs})
	if err != nil {
		t.Fatal(err)
	}
	defer secure.Stop()
	etcd, err := testsrv.StartEtcd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Stop()
	etcdTLS, err := testsrv.StartEtcdTLS(ctx, certs)
	if err != nil {
		t.Fatal(err)
	}
	defer etcdTLS.Stop()
	for _, c := range []struct {
		url  string
		want error
	}{
		// A plain server waits for the TLS client's first request: the
		// connect timeout ends the wait, whatever it is.
		{"rediss://" + plain.Addr + "?connect_timeout=1s&cacert=" + certs.CA, urlutil.ErrNoTLSAnswer},
		{"redis://" + secure.Addr, urlutil.ErrTLSAnswer},
		{"etcd://" + etcd.Addr + "?connect_timeout=1s&cacert=" + certs.CA, urlutil.ErrNoTLSAnswer},
		{"etcd://" + etcdTLS.Addr, urlutil.ErrTLSAnswer},
	} {
		if err := openResult(t, c.url); !errors.Is(err, c.want) || !errors.Is(err, dlock.ErrUnavailable) {
			t.Errorf("Open(%s): %v; want %v and ErrUnavailable", c.url, err, c.want)
		}
	}
}

// TestRunOnUnreachableStore runs `dlock run` on a ZooKeeper address where
// nothing listens: it fails with status 69 instead of waiting for ever.
// (TestOpenNeverHangs checks that Open ends without connect_timeout too.)
func TestRunOnUnreachableStore(t *testing.T) {
	l := startListeners(t)
	for _, addr := range []string{l.closed, l.silent} {
		r := runMain(t, "run", "--url", "zk://"+addr+"?connect_timeout=1s", "--key", "k", "--", "true")
		if r.code != cli.ExitUnavailable || !strings.Contains(r.stderr, addr) {
			t.Errorf("exit status %d, stderr %q; want %d and the address named", r.code, r.stderr, cli.ExitUnavailable)
		}
	}
}

// TestOpenClassifies checks that Open marks what asking again cannot mend
// (refused credentials, an untrusted certificate or host name, a server
// that demands TLS) as ErrPermanent, as waits do, and that `dlock run`
// exits with status 69 without quoting the password.
func TestOpenClassifies(t *testing.T) {
	ctx := context.Background()
	certs, err := testcert.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other, err := testcert.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const password = "s3cret-Pa55"
	rs, err := testsrv.StartRedisTLS(ctx, testsrv.RedisTLS{Certs: certs, Password: password})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Stop()
	pg, err := testsrv.StartPostgresTLS(ctx, testsrv.PostgresTLS{Certs: certs})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	redisURL := "rediss://:%s@" + rs.Addr + "?cacert=%s%s"
	for _, c := range []struct{ name, url, hint string }{
		{"WRONGPASS", fmt.Sprintf(redisURL, "wrong-Pa55", certs.CA, ""), ""},
		{"NOAUTH", "rediss://" + rs.Addr + "?cacert=" + certs.CA, ""},
		{"unknown CA", fmt.Sprintf(redisURL, password, other.CA, ""), ""},
		{"certificate of another host", fmt.Sprintf(redisURL, password, certs.CA, "&servername=other.example"), ""},
		{"redlock WRONGPASS", fmt.Sprintf("redlocks://:%s@"+rs.Addr+"?cacert=%s", "wrong-Pa55", certs.CA), ""},
		{"postgres without TLS", dlocktestEdit(t, pg.URL, "sslmode", "disable", "sslrootcert", ""), "the server takes only TLS connections: add sslmode=verify-full"},
		{"postgres unknown CA", dlocktestEdit(t, pg.URL, "sslrootcert", other.CA), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := openResult(t, c.url)
			if !errors.Is(err, dlock.ErrPermanent) || !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), c.hint) {
				t.Errorf("Open: %v; want ErrPermanent and ErrUnavailable, and %q", err, c.hint)
			}
			if strings.Contains(err.Error(), password) {
				t.Errorf("the error quotes the password: %v", err)
			}
		})
	}
	r := runMain(t, "run", "--url", fmt.Sprintf(redisURL, "wrong-Pa55", certs.CA, ""), "--key", "k", "--", "true")
	if r.code != cli.ExitUnavailable || !strings.Contains(r.stderr, "WRONGPASS") || strings.Contains(r.stderr, "wrong-Pa55") {
		t.Errorf("dlock run: exit status %d, stderr %q; want %d, WRONGPASS named and the password not", r.code, r.stderr, cli.ExitUnavailable)
	}
}

// dlocktestEdit returns raw with the query parameters kv (name, value, ...)
// set, or removed where the value is empty.
func dlocktestEdit(t *testing.T, raw string, kv ...string) string {
	return dlocktest.EditURL(t, raw, "", "", kv...)
}

// TestURLTypos checks that the URL typos a person makes get a usage error
// (status 64) with a hint at the URL meant, and no password.
func TestURLTypos(t *testing.T) {
	for _, c := range []struct{ url, want string }{
		{"redis:/127.0.0.1:6379", "did you mean redis://127.0.0.1:6379?"},
		{"zk:/127.0.0.1:2181", "did you mean zk://127.0.0.1:2181?"},
		{"redis:/:s3cret@127.0.0.1:6379", "did you mean redis://:xxxxx@127.0.0.1:6379?"},
		{"127.0.0.1:6379", "write, say, redis://127.0.0.1:6379"},
		{"localhost:6379", "write, say, redis://localhost:6379"},
		{"http://127.0.0.1:2379", "did you mean etcd://127.0.0.1:2379?"},
		{"etcds://127.0.0.1:2379", "did you mean etcd://127.0.0.1:2379?cacert="},
		{"https://127.0.0.1:2379", "did you mean etcd://127.0.0.1:2379?cacert="},
		{"zookeeper://127.0.0.1:2181", "did you mean zk://127.0.0.1:2181?"},
		{"redis://127.0.0.1:99999", `bad port "99999"`},
		{"redis://127.0.0.1:0", `bad port "0"`},
		{"redlock://127.0.0.1:6379,127.0.0.1:70000", `bad port "70000"`},
		{"etcd://:s3cret@127.0.0.1:123456", `bad port "123456"`},
	} {
		t.Run(c.url, func(t *testing.T) {
			_, err := dlock.Open(context.Background(), c.url)
			var ae *dlock.ArgError
			if !errors.As(err, &ae) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("Open: %v; want an *ArgError saying %q, without the password", err, c.want)
			}
			r := runMain(t, "run", "--url", c.url, "--key", "k", "--", "true")
			if r.code != cli.ExitUsage || !strings.Contains(r.stderr, c.want) {
				t.Errorf("dlock run: exit status %d, stderr %q; want %d and %q", r.code, r.stderr, cli.ExitUsage, c.want)
			}
		})
	}
}

// TestOpenConnectTimeout checks that every network URL takes
// connect_timeout, which bounds Open, and refuses it beside the store's own
// name for it.
func TestOpenConnectTimeout(t *testing.T) {
	l := startListeners(t)
	for _, raw := range []string{
		"redis://%s?connect_timeout=1500ms",
		"redis+sentinel://%s/mymaster?connect_timeout=1500ms", "redis+cluster://%s?connect_timeout=1500ms",
		"redlock://%s?connect_timeout=1500ms", "etcd://%s?connect_timeout=1500ms", "zk://%s?connect_timeout=1500ms",
		"memcached://%s?connect_timeout=1500ms&timeout=1500ms", "mysql://u:p@%s/db?insecure_auth=true&connect_timeout=1500ms",
	} {
		t.Run(raw, func(t *testing.T) {
			t.Parallel()
			if err := openResult(t, fmt.Sprintf(raw, l.silent)); !timedOut(err) || !strings.Contains(err.Error(), "1.5s") {
				t.Errorf("Open: %v; want a timeout of 1.5s", err)
			}
		})
	}
	for _, raw := range []string{
		"redis://%s?connect_timeout=1s&dial_timeout=2s", "redlock://%s?connect_timeout=1s&dial_timeout=2s",
		"etcd://%s?connect_timeout=1s&dial-timeout=2s", "mysql://u:p@%s/db?insecure_auth=true&connect_timeout=1s&timeout=2s",
	} {
		var ae *dlock.ArgError
		if _, err := dlock.Open(context.Background(), fmt.Sprintf(raw, l.silent)); !errors.As(err, &ae) || !strings.Contains(err.Error(), "both connect_timeout and") {
			t.Errorf("Open(%s): %v; want an *ArgError for both timeouts", raw, err)
		}
	}
}
