package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/sqldlock"
	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// schemaCreator is implemented by drivers whose store needs a schema (the
// SQL backends).
type schemaCreator interface {
	CreateSchema(ctx context.Context) error
}

func (a *app) schemaCommand() *cobra.Command {
	var print bool
	cmd := &cobra.Command{
		Use:   "schema",
		Short: "Create the lock table in an SQL store, or print its statements",
		Long: `Create the tables (and functions or procedures) dlock keeps its locks in, in
the SQL store named by --url, $DLOCK_URL or the default. dlock creates them
on first use anyway; this command is for teams that manage their schema
explicitly and run dlock with a database user that cannot create tables. It
does nothing if they exist.

With --print, dlock prints the statements instead, for the store's dialect
and table (the URL's table parameter), ready for psql, mysql or sqlite3, and
does not connect to the store.

On a store that keeps no table (Redis, etcd, ZooKeeper, memcached) there is
nothing to create: dlock says so and exits 0.

Exit status: 0 on success (or nothing to create), 64 on a usage error, 69 if
the store cannot be reached.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if print {
				return a.printSchema()
			}
			return a.withClient(func(ctx context.Context, c *dlock.Client) error {
				sc, ok := c.Driver().(schemaCreator)
				if !ok {
					fmt.Fprintln(a.stdout, "this store keeps no schema: nothing to create")
					return nil
				}
				if err := sc.CreateSchema(ctx); err != nil {
					return storeError("cannot create the schema", err)
				}
				fmt.Fprintln(a.stdout, "schema created")
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&print, "print", false, "print the statements instead of running them (no connection)")
	return cmd
}

// printSchema prints the statements that create the schema of the resolved
// store, or says that it keeps none.
func (a *app) printSchema() error {
	raw, err := a.storeURL()
	if err != nil {
		return err
	}
	u, err := url.Parse(raw)
	if err != nil {
		return usagef("invalid store URL: %v", err)
	}
	script, err := sqldlock.SchemaScript(u)
	switch {
	case errors.Is(err, dlock.ErrUnsupported):
		fmt.Fprintln(a.stdout, "this store keeps no schema: nothing to create")
		return nil
	case err != nil:
		return storeError("cannot print the schema", err)
	}
	fmt.Fprint(a.stdout, script)
	return nil
}

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and the supported stores",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintln(a.stdout, version())
			return nil
		},
	}
}

// releaseVersion is the version scripts/release-build.sh stamps into the
// binaries it builds; other builds report the module version Go records
// (go install github.com/dlockhq/dlock/cmd/dlock@v0.1.0 records v0.1.0).
var releaseVersion string

// version returns what 'dlock version' and 'dlock --version' print: the
// module version, the Go version and platform, and the URL schemes built in.
func version() string {
	v := releaseVersion
	if bi, ok := debug.ReadBuildInfo(); ok && v == "" {
		v = bi.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	return fmt.Sprintf("dlock %s %s %s/%s\nstores: %s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH, strings.Join(dlock.Schemes(), ", "))
}

// manCommand writes the manual pages of the command tree.
func (a *app) manCommand() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "man --dir DIR",
		Short: "Write dlock's manual pages (section 1) into a directory",
		Long: `Write a manual page for dlock and one for each of its commands (dlock.1,
dlock-run.1, ...) into DIR, generated from the same help as --help. To
install them system-wide:

  sudo dlock man --dir /usr/local/share/man/man1 && sudo mandb -q

Exit status: 0 on success, 64 on a usage error, 73 if DIR cannot be
written.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return usagef("--dir is required: the directory to write the pages into")
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return exitf(ExitCantCreate, "cannot create %s: %v", dir, err)
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true
			header := &doc.GenManHeader{Title: "DLOCK", Section: "1", Source: "dlock", Manual: "dlock manual"}
			if err := doc.GenManTree(root, header, dir); err != nil {
				return exitf(ExitCantCreate, "cannot write the pages: %v", err)
			}
			fmt.Fprintf(a.stdout, "wrote the manual pages into %s\n", dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory to write the pages into (created if missing)")
	return cmd
}
