package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/dlockhq/dlock"
	"github.com/spf13/cobra"
)

// schemaCreator is implemented by drivers whose store needs a schema (the
// SQL backends).
type schemaCreator interface {
	CreateSchema(ctx context.Context) error
}

func (a *app) schemaCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Create the lock table in an SQL store",
		Long: `Create the table (and indexes) dlock keeps its locks in, in the SQL store
named by --url, $DLOCK_URL or the default. dlock creates it on first use
anyway; this command is for teams that manage their schema explicitly and
run dlock with a database user that cannot create tables. It does nothing
if the table exists.

On a store that keeps no table (Redis, etcd, ZooKeeper, memcached) there is
nothing to create: dlock says so and exits 0.

Exit status: 0 on success (or nothing to create), 64 on a usage error, 69 if
the store cannot be reached.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
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

// version returns what 'dlock version' and 'dlock --version' print: the
// module version, the Go version and platform, and the URL schemes built in.
func version() string {
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		v = bi.Main.Version
	}
	return fmt.Sprintf("dlock %s %s %s/%s\nstores: %s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH, strings.Join(dlock.Schemes(), ", "))
}
