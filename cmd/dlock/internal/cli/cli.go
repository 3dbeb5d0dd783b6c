// Package cli implements the dlock command-line tool: `dlock run` (a
// distributed flock), `dlock hold`, `dlock extend` and `dlock release --hold`
// (a hold that outlives the process), `dlock ls`, `dlock release --force`,
// `dlock schema`, `dlock check` (the safety checker) and `dlock version`. The
// binary in cmd/dlock only calls Main.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"

	"github.com/dlockhq/dlock/internal/errtext"
	"github.com/spf13/cobra"
)

// Exit statuses of the dlock command. A command run by `dlock run` can exit
// with any of these too; dlock always prints a message on stderr when the
// status is its own.
const (
	// ExitOK means success. `dlock run` also passes the command's status
	// through, so 0 there means the command succeeded.
	ExitOK = 0

	// ExitUsage (EX_USAGE) means bad flags or arguments: a missing or empty
	// --key, a duration that is not positive where it must be, a URL that does
	// not parse or names an unknown scheme, no command to run. Nothing was
	// acquired and no command ran.
	ExitUsage = 64

	// ExitUnavailable (EX_UNAVAILABLE) means the lock store could not be used:
	// it cannot be opened or reached, it failed a request, or it does not
	// support the operation (listing, forced release, schema creation, a
	// hold that outlives dlock). No command ran.
	ExitUnavailable = 69

	// ExitOSError (EX_OSERR) means an operating-system call that should not
	// fail did: dlock could not wait for the command it started. dlock
	// killed the command's process group and released the lock.
	ExitOSError = 71

	// ExitCantCreate (EX_CANTCREAT) means `dlock man` could not write its
	// pages into the directory given.
	ExitCantCreate = 73

	// ExitNotAcquired (EX_TEMPFAIL) means `dlock run` or `dlock hold` did
	// not get the lock: it was held and --wait 0 was given, or --wait ran
	// out. The command did not run; no hold was taken.
	ExitNotAcquired = 75

	// ExitLost means the lock was lost while the command ran (its lease could
	// not be renewed in time, or an operator forced its release) or reached
	// --max-hold: dlock sent SIGTERM to the command's process group, then
	// SIGKILL after --kill-after, and the command's work may have overlapped
	// another holder's. From `dlock extend` and `dlock release --hold` it
	// means the hold is no longer held: it was released, or its lease ended.
	ExitLost = 76

	// ExitCannotRun means the command was found but could not be started
	// (permission denied, a directory, not an executable), as in shells.
	ExitCannotRun = 126

	// ExitNotFound means the command was not found, as in shells.
	ExitNotFound = 127

	// ExitSignalBase is added to a signal number: when the command is killed
	// by signal N, `dlock run` exits with 128+N, as shells report it; so it
	// does when it is interrupted by signal N while waiting for the lock.
	ExitSignalBase = 128
)

// exitError carries an exit status out of a command. A nil err means the
// status needs no message (for example a command's own exit status).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func exitf(code int, format string, args ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, args...)}
}

// usageError marks an error as a usage error (exit status 64).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// app holds what the commands share: the standard streams and the global
// flags.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer // the standard streams, as the command of `dlock run` gets them
	diag           io.Writer // dlock's own messages: stderr through a redactingWriter

	url     string // --url
	verbose bool   // --verbose

	log *slog.Logger // logs to stderr with --verbose, else discards
}

// Main runs the dlock command line with args (without the program name) and
// returns the process exit status.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	stdout, stderr = lockWriter(stdout), lockWriter(stderr)
	diag := redactingWriter{stderr}
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, diag: diag, log: slog.New(slog.DiscardHandler)}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(diag)
	if len(args) == 0 {
		// No subcommand: show the usage, as a usage error.
		root.SetOut(diag)
		root.Usage()
		return ExitUsage
	}
	cmd, err := root.ExecuteContextC(context.Background())
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(diag, "dlock: %s\n", message(ee.err))
		}
		return ee.code
	}
	// Anything else comes from flag parsing, argument checks or our own
	// validation: a usage error.
	fmt.Fprintf(diag, "dlock: %s\n", message(err))
	if cmd == nil {
		cmd = root
	}
	fmt.Fprintf(diag, "Run '%s --help' for usage.\n", cmd.CommandPath())
	return ExitUsage
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "dlock",
		Short: "Distributed locks from the command line",
		Long: `dlock takes distributed locks (leases with fencing tokens) in a shared store.

The store is named by a URL: --url, else the DLOCK_URL environment variable,
else an SQLite file in the user's state directory
($XDG_STATE_HOME/dlock/dlock.db, or ~/.local/state/dlock/dlock.db), so that
processes on one host coordinate with no set-up. The stores, by URL:

  sqlite:///var/lib/myapp/locks.db                  SQLite file (one host)
  postgres://user:password@db.example.com:5432/app  PostgreSQL
  mysql://user:password@db.example.com:3306/app     MySQL or MariaDB
  redis://user:password@redis.example.com:6379/0    Redis (rediss:// for TLS)
  redis+sentinel://sentinel1:26379,sentinel2:26379/mymaster
  redis+cluster://node1:6379,node2:6379             Redis Cluster
  redlock://redis1:6379,redis2:6379,redis3:6379     Redlock over N Redis servers (redlocks:// for TLS)
  memcached://cache1:11211                          memcached
  etcd://etcd1:2379,etcd2:2379?session=15s          etcd
  zk://zk1:2181,zk2:2181/chroot?session=15s         ZooKeeper
  nats://nats1:4222,nats2:4222/BUCKET?replicas=3    NATS JetStream key-value

TLS: rediss:// and redlocks://, or on etcd://, zk://, nats://, redis:// and mysql://
the parameters cacert=, cert= and key= (PEM files; tls=true for the system's
roots); PostgreSQL takes its own sslmode=verify-full&sslrootcert=... A
password in an etcd://, zk:// or nats:// URL is sent only over TLS.

The SQL stores keep their locks in the table dlock_locks unless the URL says
otherwise with ?table=NAME; 'dlock schema' creates it ahead of time. Exit
status 0 is success; 64 a usage error; 69 a store that cannot be reached;
75 a lock that is held; 76 a lock lost (see each command's help).`,
		Version:       version(),
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return &usageError{suggestUnit(err)} })
	root.PersistentPreRunE = func(c *cobra.Command, args []string) error {
		if c.Flags().Changed("url") && strings.TrimSpace(a.url) == "" {
			return usagef("invalid --url %q: must not be empty", a.url)
		}
		if a.verbose {
			a.log = slog.New(slog.NewTextHandler(a.diag, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		routeStoreLogs(a.log)
		return nil
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.url, "url", "", "store URL (default: $DLOCK_URL, else the SQLite file in the user's state directory)")
	pf.BoolVarP(&a.verbose, "verbose", "v", false, "log lock events to stderr")
	root.AddCommand(a.runCommand(), a.holdCommand(), a.extendCommand(), a.lsCommand(), a.releaseCommand(), a.schemaCommand(), a.checkCommand(), a.checkWorkerCommand(), a.versionCommand(), a.manCommand())
	return root
}

// logf prints one diagnostic line on stderr.
func (a *app) logf(format string, args ...any) {
	fmt.Fprintf(a.diag, "dlock: "+format+"\n", args...)
}

// display quotes s if it contains characters that would garble a one-line
// message or a table (control characters, tabs, invalid UTF-8).
func display(s string) string {
	if s == "" {
		return `""`
	}
	for _, r := range s {
		if r < ' ' || r == 0x7f || r == 0xfffd || (r >= 0x80 && r < 0xa0) {
			return fmt.Sprintf("%q", s)
		}
	}
	return s
}

// lockWriter serialises writes to w unless w is a file, which `dlock run`
// hands to its command as is (writes to a file need no lock). Without it a
// command's output, copied by os/exec, would race with dlock's messages.
func lockWriter(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	if _, ok := w.(*os.File); ok {
		return w
	}
	return &lockedWriter{w: w}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// message returns err's text without the "dlock: " the library's errors
// start with, since dlock prefixes its messages itself.
func message(err error) string { return errtext.Bare(err).Error() }

// env returns the environment variable name, treating blank values as unset.
func env(name string) string { return strings.TrimSpace(os.Getenv(name)) }

// missingUnit matches the flag error of a duration given without a unit.
var missingUnit = regexp.MustCompile(`missing unit in duration "(-?[0-9.]+)"`)

// suggestUnit adds to the error of a duration flag given without a unit
// ("--wait 10") what was probably meant.
func suggestUnit(err error) error {
	if m := missingUnit.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Errorf("%w (durations need a unit: %ss for seconds, or ms, m, h)", err, m[1])
	}
	return err
}
