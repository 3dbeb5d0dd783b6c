package testsrv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// StartPostgres initialises a PostgreSQL cluster in a new temporary
// directory, starts it on a free port on 127.0.0.1 (trust authentication,
// superuser "postgres", fsync off, so that a commit survives a crash of the
// server but not of the machine), waits until it accepts connections, and
// creates the database "dlock". When the test process runs as root, initdb
// and postgres run as the "postgres" system user. The error wraps ErrMissing
// if initdb or postgres cannot be found.
func StartPostgres(ctx context.Context) (*Server, error) {
	return startPostgres(ctx, postgresOptions{name: Postgres, params: "sslmode=disable"})
}

// postgresOptions are what the PostgreSQL servers of StartPostgres and
// StartPostgresTLS differ in.
type postgresOptions struct {
	name string // the Server's Name
	// params is the query of the URLs of the server's databases, which
	// the harness also connects with.
	params string
	// setup, if set, prepares the data directory after initdb (run as
	// the test process's user; cred is the server's user, or nil).
	setup func(data string, cred *syscall.Credential) error
	// args are more server options (-c name=value).
	args []string
}

// startPostgres starts a PostgreSQL server as StartPostgres documents, with
// opts.
func startPostgres(ctx context.Context, opts postgresOptions) (_ *Server, err error) {
	initdb, postgres, psql, err := findPostgres()
	if err != nil {
		return nil, err
	}
	cred, err := postgresCredential()
	if err != nil {
		return nil, err
	}
	s, err := newServer(opts.name, cred, syscall.SIGINT)
	if err != nil {
		return nil, err
	}
	defer s.abandonOnError(&err)
	dir := s.Dir

	data := filepath.Join(dir, "data")
	if err := runTool(ctx, initdb, []string{
		"-D", data, "-U", "postgres", "--auth=trust", "--no-locale", "--encoding=UTF8", "--no-sync",
	}, dir, cred, s.logPath); err != nil {
		return nil, err
	}
	if opts.setup != nil {
		if err := opts.setup(data, cred); err != nil {
			return nil, err
		}
	}
	pgURL := func(port int, db string) string { return pgURLParams(port, db, opts.params) }
	// query runs SQL with psql on the server's database "postgres".
	query := func(ctx context.Context, port int, sql string) error {
		_, err := runClient(ctx, psql, []string{"-X", "-w", "-q", "-v", "ON_ERROR_STOP=1", "-d", pgURL(port, "postgres")}, sql)
		return err
	}

	start := func(port int, log *os.File) (*exec.Cmd, error) {
		return startProcess(postgres, append([]string{
			"-D", data,
			"-p", strconv.Itoa(port),
			"-c", "listen_addresses=127.0.0.1",
			"-c", "unix_socket_directories=" + dir,
			"-c", "fsync=off",
			"-c", "full_page_writes=off",
			"-c", "shared_buffers=16MB",
			"-c", "max_connections=400",
			"-c", "huge_pages=off",
			"-c", "logging_collector=off",
			"-c", "log_min_messages=warning",
		}, opts.args...), dir, cred, log)
	}
	ready := func(ctx context.Context, port int) error { return query(ctx, port, "SELECT 1") }
	if err := s.launch(ctx, start, ready); err != nil {
		return nil, err
	}

	port := s.port
	s.Addr = "127.0.0.1:" + strconv.Itoa(port)
	s.Addrs = []string{s.Addr}
	s.dbURL = func(db string) (string, string) {
		u := pgURL(port, db)
		return u, u
	}
	s.newDB = func(ctx context.Context, db string) error {
		ident := `"` + strings.ReplaceAll(db, `"`, `""`) + `"`
		// WITH (FORCE), from PostgreSQL 13 on, also drops a previous
		// test's leftover connections.
		return query(ctx, port, `SELECT current_setting('server_version_num')::int >= 130000 AS force \gset
\if :force
DROP DATABASE IF EXISTS `+ident+` WITH (FORCE);
\else
DROP DATABASE IF EXISTS `+ident+`;
\endif
CREATE DATABASE `+ident+`;
`)
	}
	if err := s.newDB(ctx, DefaultDatabase); err != nil {
		return nil, fmt.Errorf("creating database %s: %w%s", DefaultDatabase, err, s.logTail())
	}
	s.URL, s.DSN = s.dbURL(DefaultDatabase)
	return s, nil
}

func pgURLParams(port int, db, params string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?%s", port, db, params)
}

// postgresCredential returns the credential to run PostgreSQL programs
// with: nil normally, the "postgres" system user when running as root
// (PostgreSQL refuses to run as root).
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("testsrv: running as root, and PostgreSQL refuses to run as root, but there is no \"postgres\" system user to run it as (%v); install the postgresql package (scripts/install-servers.sh) or run the tests as a normal user", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("testsrv: bad uid/gid for user postgres: %q/%q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// postgresGlobs are the distribution directories searched for PostgreSQL.
var postgresGlobs = []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin"}

// findPostgres finds initdb, postgres and psql: the newest version in the
// distribution directories (/usr/lib/postgresql/*/bin on Debian,
// /usr/pgsql-*/bin on RHEL), else in PATH, else next to pg_config --bindir.
// psql is the one beside postgres, else the one in PATH.
func findPostgres() (initdb, postgres, psql string, err error) {
	initdb, postgres, err = findPostgresServer()
	if err != nil {
		return "", "", "", err
	}
	if psql = firstExisting(filepath.Join(filepath.Dir(postgres), "psql")); psql == "" {
		psql = lookPath([]string{"psql"})
	}
	if psql == "" {
		return "", "", "", fmt.Errorf("%w: postgres (psql not found beside %s or in PATH)", ErrMissing, postgres)
	}
	return initdb, postgres, psql, nil
}

// findPostgresServer finds initdb and postgres as findPostgres does.
func findPostgresServer() (initdb, postgres string, err error) {
	var dirs []string
	for _, pattern := range postgresGlobs {
		m, _ := filepath.Glob(pattern)
		sort.Slice(m, func(i, j int) bool { return versionLess(m[j], m[i]) })
		dirs = append(dirs, m...)
	}
	for _, d := range dirs {
		i, p := firstExisting(filepath.Join(d, "initdb")), firstExisting(filepath.Join(d, "postgres"))
		if i != "" && p != "" {
			return i, p, nil
		}
	}
	i, p := lookPath([]string{"initdb"}), lookPath([]string{"postgres"})
	if (i == "" || p == "") && lookPath([]string{"pg_config"}) != "" {
		if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
			d := strings.TrimSpace(string(out))
			if i == "" {
				i = firstExisting(filepath.Join(d, "initdb"))
			}
			if p == "" {
				p = firstExisting(filepath.Join(d, "postgres"))
			}
		}
	}
	if i == "" || p == "" {
		return "", "", fmt.Errorf("%w: postgres (initdb and postgres not found in /usr/lib/postgresql/*/bin, /usr/pgsql-*/bin or PATH)", ErrMissing)
	}
	return i, p, nil
}

// versionLess compares the numeric version components of two paths such
// as /usr/lib/postgresql/9.6/bin and /usr/lib/postgresql/15/bin.
func versionLess(a, b string) bool {
	va, vb := versionOf(a), versionOf(b)
	for k := 0; k < len(va) && k < len(vb); k++ {
		if va[k] != vb[k] {
			return va[k] < vb[k]
		}
	}
	return len(va) < len(vb)
}

func versionOf(path string) []int {
	var v []int
	for _, f := range strings.FieldsFunc(path, func(r rune) bool { return r < '0' || r > '9' }) {
		n, _ := strconv.Atoi(f)
		v = append(v, n)
	}
	return v
}
