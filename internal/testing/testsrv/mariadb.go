package testsrv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// StartMariaDB initialises a MariaDB data directory in a new temporary
// directory, starts mariadbd on a free port on 127.0.0.1 (user root without
// password, binary log off, InnoDB tuned for speed), waits until it accepts
// connections, and creates the database "dlock". The error wraps ErrMissing
// if mariadbd/mysqld or mariadb-install-db/mysql_install_db cannot be found.
func StartMariaDB(ctx context.Context) (*Server, error) { return StartMariaDBWith(ctx) }

// StartMariaDBWith starts a MariaDB server as StartMariaDB does, with the
// extra server options given (such as --log-bin, which turns the binary
// log on).
func StartMariaDBWith(ctx context.Context, extra ...string) (*Server, error) {
	return startMariaDB(ctx, MariaDB, extra, "")
}

// startMariaDB starts a MariaDB server as StartMariaDB documents, named
// name, with the more server options extra, and runs the SQL setup as root
// once it has created the default database.
func startMariaDB(ctx context.Context, name string, extra []string, setup string) (_ *Server, err error) {
	mysqld, installDB, client, err := findMariaDB()
	if err != nil {
		return nil, err
	}
	s, err := newServer(name, nil, syscall.SIGTERM)
	if err != nil {
		return nil, err
	}
	defer s.abandonOnError(&err)
	dir := s.Dir

	data := filepath.Join(dir, "data")
	socket := filepath.Join(dir, "mysql.sock")
	// Options given to both the bootstrap and the server, so that the
	// InnoDB files created by the bootstrap fit the server.
	common := []string{
		"--innodb-buffer-pool-size=64M",
		"--innodb-log-file-size=16M",
		"--innodb-use-native-aio=0", // io_uring/libaio are often unavailable in containers
		"--skip-log-bin",
		"--skip-name-resolve",
	}
	if os.Geteuid() == 0 {
		common = append(common, "--user=root") // mariadbd refuses to run as root otherwise
	}

	// --auth-root-authentication-method=normal creates root@localhost,
	// root@127.0.0.1 and root@::1 without a password (the default, "socket",
	// only allows the OS user root over the unix socket).
	install := append([]string{
		"--no-defaults", // must come first
		"--datadir=" + data,
		"--auth-root-authentication-method=normal",
		"--skip-test-db",
	}, common...)
	if err := runTool(ctx, installDB, install, dir, nil, s.logPath); err != nil {
		return nil, err
	}

	start := func(port int, log *os.File) (*exec.Cmd, error) {
		args := append([]string{
			"--no-defaults", // must come first: ignore /etc/mysql
			"--datadir=" + data,
			"--socket=" + socket,
			"--port=" + strconv.Itoa(port),
			"--bind-address=127.0.0.1",
			"--pid-file=" + filepath.Join(dir, "mariadbd.pid"),
			"--tmpdir=" + dir,
			"--innodb-flush-log-at-trx-commit=2",
			"--max-connections=200",
			"--character-set-server=utf8mb4",
			"--collation-server=utf8mb4_general_ci",
		}, common...)
		return startProcess(mysqld, append(args, extra...), dir, nil, log)
	}
	// root runs SQL as root over TCP.
	root := func(ctx context.Context, port int, sql string) error {
		return runMariaDB(ctx, client, sql, "--host=127.0.0.1", "--port="+strconv.Itoa(port))
	}
	ready := func(ctx context.Context, port int) error {
		err := root(ctx, port, "SELECT 1")
		if err != nil && (strings.Contains(err.Error(), "ERROR 1045 ") || strings.Contains(err.Error(), "ERROR 1130 ")) {
			// Up, but root may not log in over TCP (another install-db
			// default): allow it through the unix socket, then retry.
			if fixErr := allowRootOverTCP(ctx, client, socket); fixErr != nil {
				return fmt.Errorf("%v; allowing root over TCP: %v", err, fixErr)
			}
		}
		return err
	}
	if err := s.launch(ctx, start, ready); err != nil {
		return nil, err
	}

	port := s.port
	s.Addr = "127.0.0.1:" + strconv.Itoa(port)
	s.Addrs = []string{s.Addr}
	s.dbURL = func(db string) (string, string) {
		return fmt.Sprintf("mysql://root@127.0.0.1:%d/%s", port, db), mysqlDSN(port, db, "parseTime=true")
	}
	s.newDB = func(ctx context.Context, db string) error {
		ident := "`" + strings.ReplaceAll(db, "`", "``") + "`"
		return root(ctx, port, "DROP DATABASE IF EXISTS "+ident+"; CREATE DATABASE "+ident+";")
	}
	if err := s.newDB(ctx, DefaultDatabase); err != nil {
		return nil, fmt.Errorf("creating database %s: %w%s", DefaultDatabase, err, s.logTail())
	}
	if err := root(ctx, port, setup); err != nil {
		return nil, fmt.Errorf("setting up: %w%s", err, s.logTail())
	}
	s.URL, s.DSN = s.dbURL(DefaultDatabase)
	return s, nil
}

func mysqlDSN(port int, db, params string) string {
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s?%s", port, db, params)
}

// runMariaDB runs sql with the MariaDB client as root, without a password
// or TLS, connecting where the options in where say. An error carries the
// client's message ("ERROR 1045 (28000): Access denied ...").
func runMariaDB(ctx context.Context, client, sql string, where ...string) error {
	args := append([]string{
		"--no-defaults", // must come first: ignore /etc/mysql and ~/.my.cnf
		"--user=root",
		"--skip-ssl",
		"--connect-timeout=2",
		"--batch",
	}, where...)
	_, err := runClient(ctx, client, args, sql)
	return err
}

// allowRootOverTCP connects as root through the unix socket and creates
// root@127.0.0.1 without a password.
func allowRootOverTCP(ctx context.Context, client, socket string) error {
	return runMariaDB(ctx, client, "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';\n"+
		"GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;\n", "--socket="+socket)
}

// mariadbDirs are searched for MariaDB programs after PATH.
var mariadbDirs = []string{"/usr/sbin", "/usr/bin", "/usr/libexec", "/usr/local/mysql/bin", "/usr/local/mysql/scripts", "/usr/local/bin"}

// findMariaDB finds the server (mariadbd or mysqld), the data directory
// bootstrap script (mariadb-install-db or mysql_install_db) and the client
// (mariadb or mysql) in PATH or the usual system directories.
func findMariaDB() (mysqld, installDB, client string, err error) {
	var missing []string
	find := func(names ...string) string {
		p := lookPath(names, mariadbDirs...)
		if p == "" {
			missing = append(missing, strings.Join(names, "/"))
		}
		return p
	}
	mysqld, installDB, client = find("mariadbd", "mysqld"), find("mariadb-install-db", "mysql_install_db"), find("mariadb", "mysql")
	if len(missing) > 0 {
		return "", "", "", fmt.Errorf("%w: mariadb (%s not found in PATH or /usr/sbin, /usr/bin)", ErrMissing, strings.Join(missing, " and "))
	}
	return mysqld, installDB, client, nil
}
