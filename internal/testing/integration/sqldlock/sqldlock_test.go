package sqldlock_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/drivertest"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	. "github.com/dlockhq/dlock/sqldlock"
	_ "github.com/dlockhq/dlock/sqldlock/mysql"
	_ "github.com/dlockhq/dlock/sqldlock/postgres"
	_ "github.com/dlockhq/dlock/sqldlock/sqlite"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	if os.Getenv(waiterEnv) != "" {
		os.Exit(waiterMain())
	}
	testsrv.Main(m, testsrv.Postgres, testsrv.MariaDB)
}

// store is a fresh database of one dialect.
type store struct {
	dialect Dialect
	url     string // dlock URL
	dsn     string // database/sql DSN
	sqlName string // database/sql driver name
}

var dialects = []Dialect{SQLite, Postgres, MySQL}

// newStore returns a fresh, empty database of dialect d for the test.
func newStore(t testing.TB, d Dialect) store {
	t.Helper()
	switch d {
	case SQLite:
		path := filepath.Join(t.TempDir(), "locks.db")
		// The caller's DSN: a busy timeout, but the default journal mode
		// and deferred transactions.
		return store{dialect: d, url: "sqlite://" + path, dsn: path + "?_busy_timeout=5000", sqlName: "sqlite"}
	case Postgres:
		u, dsn, err := testsrv.Get(t, testsrv.Postgres).NewDatabase(context.Background(), t.Name())
		if err != nil {
			t.Fatal(err)
		}
		return store{dialect: d, url: u, dsn: dsn, sqlName: "pgx"}
	case MySQL:
		u, dsn, err := testsrv.Get(t, testsrv.MariaDB).NewDatabase(context.Background(), t.Name())
		if err != nil {
			t.Fatal(err)
		}
		return store{dialect: d, url: u, dsn: dsn, sqlName: "mysql"}
	}
	t.Fatalf("unknown dialect %v", d)
	return store{}
}

// openURL opens a driver through the URL opener registered for the scheme.
func openURL(ctx context.Context, raw string) (*Driver, error) {
	c, err := dlock.Open(ctx, raw)
	if err != nil {
		return nil, err
	}
	return c.Driver().(*Driver), nil
}

// urlWith returns s's URL with the extra parameters (NAME=VALUE) added.
func (s store) urlWith(extra ...string) string {
	raw := s.url
	for _, e := range extra {
		sep := "?"
		if u, _ := url.Parse(raw); u != nil && u.RawQuery != "" {
			sep = "&"
		}
		raw += sep + e
	}
	return raw
}

// open returns a new driver (with its own connections) over s, closed when
// the test ends.
func (s store) open(t testing.TB, extra ...string) *Driver {
	t.Helper()
	raw := s.urlWith(extra...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := openURL(ctx, raw)
	if err != nil {
		t.Fatalf("open %s: %v", raw, err)
	}
	driverStores.Store(d, s)
	t.Cleanup(func() {
		d.Close()
		driverStores.Delete(d)
	})
	return d
}

// driverStores maps the drivers store.open returns to their stores, for the
// tests that read the drivers' rows.
var driverStores sync.Map // *Driver → store

// config is the conformance suite's configuration over s, with the extra
// URL parameters.
func (s store) config(t testing.TB, extra ...string) drivertest.Config {
	counter := s.open(t)
	raw := s.urlWith(extra...)
	return drivertest.Config{
		NewDriver: func(t testing.TB) driver.Driver {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			d, err := openURL(ctx, raw)
			if err != nil {
				t.Fatalf("open %s: %v", raw, err)
			}
			return d
		},
		Residue:       counter.Count,
		NewHungDriver: s.hungDriver(extra...),
	}
}

// viaProxy returns s's URL with the extra parameters, dialling the server
// through a testsrv.Proxy that delays every chunk of bytes by delay; the
// proxy is closed when t ends. Only PostgreSQL and MySQL have a server.
func (s store) viaProxy(t testing.TB, delay time.Duration, extra ...string) (string, *testsrv.Proxy) {
	t.Helper()
	u, err := url.Parse(s.urlWith(extra...))
	if err != nil {
		t.Fatal(err)
	}
	p, err := testsrv.StartDelayedProxy(u.Host, delay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	u.Host = p.Addr()
	return u.String(), p
}

// hungDriver returns the conformance suite's NewHungDriver for s: a driver
// whose connections go through a proxy, and the proxy's Block. SQLite is a
// local file, which cannot hang: nil.
func (s store) hungDriver(extra ...string) func(t testing.TB) (driver.Driver, func()) {
	if s.dialect == SQLite {
		return nil
	}
	return func(t testing.TB) (driver.Driver, func()) {
		raw, p := s.viaProxy(t, 0, extra...)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		d, err := openURL(ctx, raw)
		if err != nil {
			t.Fatalf("open %s: %v", raw, err)
		}
		return d, p.Block
	}
}

// driverMode is a driver configuration the conformance suite and the
// benchmarks run: its name's suffix and its URL parameters.
type driverMode struct {
	suffix string
	params []string
}

// driverModes are the default configuration and the fair one (WithFair).
var driverModes = []driverMode{{"", nil}, {"-fair", []string{"fair=1"}}}

func TestConformance(t *testing.T) {
	for _, d := range dialects {
		for _, m := range driverModes {
			t.Run(d.String()+m.suffix, func(t *testing.T) {
				drivertest.Run(t, newStore(t, d).config(t, m.params...))
			})
		}
	}
}

func BenchmarkDrivers(b *testing.B) {
	for _, d := range dialects {
		for _, m := range driverModes {
			b.Run(d.String()+m.suffix, func(b *testing.B) {
				drivertest.RunBenchmarks(b, newStore(b, d).config(b, m.params...))
			})
		}
	}
}
