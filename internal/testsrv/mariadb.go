package testsrv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/go-sql-driver/mysql"
)

// StartMariaDB initialises a MariaDB data directory in a new temporary
// directory, starts mariadbd on a free port on 127.0.0.1 (user root without
// password, binary log off, InnoDB tuned for speed), waits until it accepts
// connections, and creates the database "dlock". The error wraps ErrMissing
// if mariadbd/mysqld or mariadb-install-db/mysql_install_db cannot be found.
func StartMariaDB(ctx context.Context) (*Server, error) {
	return startMariaDB(ctx, MariaDB, nil)
}

// startMariaDB starts a MariaDB server as StartMariaDB documents, named
// name, with the more server options extra.
func startMariaDB(ctx context.Context, name string, extra []string) (_ *Server, err error) {
	mysqld, installDB, err := findMariaDB()
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
	ready := func(ctx context.Context, port int) error {
		err := pingMySQL(ctx, mysqlDSN(port, "", "timeout=2s"))
		var myErr *mysql.MySQLError
		if errors.As(err, &myErr) && (myErr.Number == 1045 || myErr.Number == 1130) {
			// Up, but root may not log in over TCP (another install-db
			// default): allow it through the unix socket, then retry.
			if fixErr := allowRootOverTCP(ctx, socket); fixErr != nil {
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
		conn, err := sql.Open("mysql", mysqlDSN(port, "", "timeout=5s"))
		if err != nil {
			return err
		}
		defer conn.Close()
		ident := "`" + strings.ReplaceAll(db, "`", "``") + "`"
		if _, err := conn.ExecContext(ctx, "DROP DATABASE IF EXISTS "+ident); err != nil {
			return err
		}
		_, err = conn.ExecContext(ctx, "CREATE DATABASE "+ident)
		return err
	}
	if err := s.newDB(ctx, DefaultDatabase); err != nil {
		return nil, fmt.Errorf("creating database %s: %w%s", DefaultDatabase, err, s.logTail())
	}
	s.URL, s.DSN = s.dbURL(DefaultDatabase)
	return s, nil
}

func mysqlDSN(port int, db, params string) string {
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s?%s", port, db, params)
}

func pingMySQL(ctx context.Context, dsn string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.PingContext(ctx)
}

// allowRootOverTCP connects as root through the unix socket and creates
// root@127.0.0.1 without a password.
func allowRootOverTCP(ctx context.Context, socket string) error {
	db, err := sql.Open("mysql", "root@unix("+socket+")/?timeout=2s")
	if err != nil {
		return err
	}
	defer db.Close()
	for _, q := range []string{
		"CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY ''",
		"GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// mariadbDirs are searched for MariaDB programs after PATH.
var mariadbDirs = []string{"/usr/sbin", "/usr/bin", "/usr/libexec", "/usr/local/mysql/bin", "/usr/local/mysql/scripts", "/usr/local/bin"}

// findMariaDB finds the server (mariadbd or mysqld) and the data directory
// bootstrap script (mariadb-install-db or mysql_install_db) in PATH or the
// usual system directories.
func findMariaDB() (mysqld, installDB string, err error) {
	mysqld = lookPath([]string{"mariadbd", "mysqld"}, mariadbDirs...)
	installDB = lookPath([]string{"mariadb-install-db", "mysql_install_db"}, mariadbDirs...)
	if mysqld == "" || installDB == "" {
		var missing []string
		if mysqld == "" {
			missing = append(missing, "mariadbd/mysqld")
		}
		if installDB == "" {
			missing = append(missing, "mariadb-install-db/mysql_install_db")
		}
		return "", "", fmt.Errorf("%w: mariadb (%s not found in PATH or /usr/sbin, /usr/bin)", ErrMissing, strings.Join(missing, " and "))
	}
	return mysqld, installDB, nil
}
