package testsrv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := Run(m, Postgres, MariaDB, Redis, RedisCluster, RedisSentinel, RedisQuorum, Memcached, Etcd, EtcdCluster, ZooKeeper, ZooKeeperEnsemble, NATS, NATSCluster)
	// Stopped servers must not leave goroutines behind.
	if err := goleak.Find(); err != nil && code == 0 {
		fmt.Fprintf(os.Stderr, "goroutine leak after stopping servers: %v\n", err)
		code = 1
	}
	os.Exit(code)
}

// query runs a single-value query against a server's DSN.
func query(t *testing.T, name, dsn, q string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out string
	switch name {
	case Postgres:
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatalf("connect %s: %v", dsn, err)
		}
		defer conn.Close(context.Background())
		if err := conn.QueryRow(ctx, q).Scan(&out); err != nil {
			t.Fatalf("%s on %s: %v", q, dsn, err)
		}
	case MariaDB:
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatalf("open %s: %v", dsn, err)
		}
		defer db.Close()
		if err := db.QueryRowContext(ctx, q).Scan(&out); err != nil {
			t.Fatalf("%s on %s: %v", q, dsn, err)
		}
	}
	return out
}

// pingMySQL connects to a MariaDB server with a go-sql-driver/mysql DSN.
func pingMySQL(ctx context.Context, dsn string) error {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return err
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	return db.PingContext(ctx)
}

// checks holds, for each kind of server, what the tests check of a running
// one.
var checks = map[string]func(*testing.T, *Server){
	Postgres: checkSQLServer, MariaDB: checkSQLServer,
	Redis: checkServer, RedisCluster: checkServer, RedisSentinel: checkServer, RedisQuorum: checkServer, Memcached: checkServer, NATS: checkNATS, NATSCluster: checkNATSCluster,
	Etcd: checkConsensusServer, ZooKeeper: checkConsensusServer,
	EtcdCluster: checkEtcdCluster, ZooKeeperEnsemble: checkZooKeeperEnsemble,
}

// TestGet checks the servers Run started.
func TestGet(t *testing.T) {
	for _, name := range knownNames() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := Get(t, name)
			if s.Name != name {
				t.Errorf("Name = %q, want %q", s.Name, name)
			}
			checks[name](t, s)
		})
	}
}

// checkSQLServer checks a running PostgreSQL or MariaDB server: its address,
// URL and DSN, and that it answers queries in the dlock database.
func checkSQLServer(t *testing.T, s *Server) {
	t.Helper()
	name := s.Name
	if !strings.HasPrefix(s.Addr, "127.0.0.1:") {
		t.Errorf("Addr = %q", s.Addr)
	}
	wantURL := map[string]string{
		Postgres: "postgres://postgres@" + s.Addr + "/dlock?sslmode=disable",
		MariaDB:  "mysql://root@" + s.Addr + "/dlock",
	}[name]
	if s.URL != wantURL {
		t.Errorf("URL = %q, want %q", s.URL, wantURL)
	}
	wantDSN := map[string]string{
		Postgres: wantURL,
		MariaDB:  "root@tcp(" + s.Addr + ")/dlock?parseTime=true",
	}[name]
	if s.DSN != wantDSN {
		t.Errorf("DSN = %q, want %q", s.DSN, wantDSN)
	}
	if got := query(t, name, s.DSN, "SELECT 1"); got != "1" {
		t.Errorf("SELECT 1 = %q", got)
	}
	if got := query(t, name, s.DSN, currentDB(name)); got != "dlock" {
		t.Errorf("current database = %q, want dlock", got)
	}
}

func currentDB(name string) string {
	if name == Postgres {
		return "SELECT current_database()"
	}
	return "SELECT DATABASE()"
}

func TestNewDatabase(t *testing.T) {
	for _, name := range []string{Postgres, MariaDB} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := Get(t, name)
			ctx := context.Background()
			url, dsn, err := s.NewDatabase(ctx, t.Name())
			if err != nil {
				t.Fatal(err)
			}
			db := DatabaseName(t.Name())
			if !strings.Contains(url, "/"+db) || !strings.Contains(dsn, "/"+db) {
				t.Errorf("url %q / dsn %q do not name database %q", url, dsn, db)
			}
			if got := query(t, name, dsn, currentDB(name)); got != db {
				t.Errorf("current database = %q, want %q", got, db)
			}
			// The database is usable, and a second NewDatabase with the same
			// name gives a fresh, empty one.
			execSQL(t, name, dsn, "CREATE TABLE leftover (id INT)")
			if _, _, err := s.NewDatabase(ctx, t.Name()); err != nil {
				t.Fatal(err)
			}
			n := query(t, name, dsn, tableCount(name))
			if n != "0" {
				t.Errorf("recreated database has %s tables, want 0", n)
			}
		})
	}
}

func tableCount(name string) string {
	if name == Postgres {
		return "SELECT count(*)::text FROM pg_tables WHERE schemaname = 'public'"
	}
	return "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()"
}

func execSQL(t *testing.T, name, dsn, stmt string) {
	t.Helper()
	ctx := context.Background()
	switch name {
	case Postgres:
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	case MariaDB:
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStartStop starts a separate server of each kind and checks that Stop
// ends every process, frees the ports and removes the directory, and is
// idempotent.
func TestStartStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts database servers")
	}
	for _, name := range knownNames() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t0 := time.Now()
			s, err := starters[name](context.Background())
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s started in %v at %s (dir %s)", name, time.Since(t0).Round(time.Millisecond), s.Addrs, s.Dir)
			checks[name](t, s)
			procs := processes(s)
			if len(procs) != len(s.Addrs) {
				t.Errorf("%d processes for %d addresses", len(procs), len(s.Addrs))
			}
			if _, err := os.Stat(s.Dir); err != nil {
				t.Fatalf("server dir: %v", err)
			}
			t1 := time.Now()
			if err := s.Stop(); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			t.Logf("%s stopped in %v", name, time.Since(t1).Round(time.Millisecond))
			if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
				t.Errorf("dir %s still exists after Stop (err %v)", s.Dir, err)
			}
			for _, p := range procs {
				if _, err := os.Stat(fmt.Sprintf("/proc/%d", p.Pid)); err == nil {
					t.Errorf("server process %d still exists after Stop", p.Pid)
				}
			}
			for _, a := range s.Addrs {
				if l, err := net.Listen("tcp", a); err != nil {
					t.Errorf("port of %s not free after Stop: %v", a, err)
				} else {
					l.Close()
				}
			}
			if err := s.Stop(); err != nil {
				t.Errorf("second Stop: %v", err)
			}
		})
	}
}

// processes returns the server processes of s (one per address).
func processes(s *Server) []*os.Process {
	if s.cmd != nil {
		return []*os.Process{s.cmd.Process}
	}
	var ps []*os.Process
	for _, m := range s.members {
		ps = append(ps, processes(m)...)
	}
	return ps
}

// TestStopAfterCrash checks that Stop reports a server that died on its own.
func TestStopAfterCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts database servers")
	}
	s, err := StartMariaDB(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for !processExited(s.cmd.Process) {
		time.Sleep(10 * time.Millisecond)
	}
	err = s.Stop()
	if err == nil || !strings.Contains(err.Error(), "exited before Stop") {
		t.Errorf("Stop after crash = %v, want an 'exited before Stop' error", err)
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("dir %s still exists after Stop", s.Dir)
	}
}

func TestDatabaseName(t *testing.T) {
	for in, want := range map[string]string{
		"dlock":    "dlock",
		"lock_1":   "lock_1",
		"TestFoo":  "testfoo_",
		"Test/a b": "test_a_b_",
		"1abc":     "db_1abc_",
	} {
		got := DatabaseName(in)
		if in == want {
			if got != want {
				t.Errorf("DatabaseName(%q) = %q, want %q", in, got, want)
			}
			continue
		}
		if !strings.HasPrefix(got, want) || len(got) != len(want)+8 || !plainIdent.MatchString(got) {
			t.Errorf("DatabaseName(%q) = %q, want %q + 8 hex digits", in, got, want)
		}
	}
	long := strings.Repeat("x", 100)
	if got := DatabaseName(long); len(got) > 63 || !plainIdent.MatchString(got) {
		t.Errorf("DatabaseName(100 x) = %q (%d bytes)", got, len(got))
	}
	if DatabaseName("A/b") == DatabaseName("a_b") {
		t.Error("distinct names map to the same database")
	}
}

func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	oldPG, oldMaria, oldRedis, oldMemcached := postgresGlobs, mariadbDirs, redisDirs, memcachedDirs
	oldEtcd, oldZK, oldJava, oldNATS := etcdDirs, zkJarDirs, javaDirs, natsDirs
	postgresGlobs, mariadbDirs, redisDirs, memcachedDirs = nil, nil, nil, nil
	etcdDirs, zkJarDirs, javaDirs, natsDirs = nil, nil, nil, nil
	t.Cleanup(func() {
		postgresGlobs, mariadbDirs, redisDirs, memcachedDirs = oldPG, oldMaria, oldRedis, oldMemcached
		etcdDirs, zkJarDirs, javaDirs, natsDirs = oldEtcd, oldZK, oldJava, oldNATS
	})
	for name, start := range starters {
		s, err := start(context.Background())
		if !errors.Is(err, ErrMissing) {
			s.Stop()
			t.Errorf("%s with empty PATH: err = %v, want ErrMissing", name, err)
		}
	}
}

// TestAllowRootOverTCP checks the fallback used when the bootstrap did not
// let root log in over TCP without a password.
func TestAllowRootOverTCP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts database servers")
	}
	ctx := context.Background()
	s, err := StartMariaDB(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	execSQL(t, MariaDB, s.DSN, "DROP USER 'root'@'127.0.0.1'")
	if err := pingMySQL(ctx, s.DSN); err == nil {
		t.Fatal("root can still log in over TCP after DROP USER")
	} else {
		t.Logf("without root@127.0.0.1: %v", err)
	}
	_, _, client, err := findMariaDB()
	if err != nil {
		t.Fatal(err)
	}
	if err := allowRootOverTCP(ctx, client, s.Dir+"/mysql.sock"); err != nil {
		t.Fatal(err)
	}
	if err := pingMySQL(ctx, s.DSN); err != nil {
		t.Fatalf("after allowRootOverTCP: %v", err)
	}
}
