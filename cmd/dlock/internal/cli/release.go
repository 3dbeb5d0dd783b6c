package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/errtext"
)

func (a *app) releaseCommand() *cobra.Command {
	var force bool
	var h holdFlag
	cmd := &cobra.Command{
		Use:   "release (--force KEY | --hold ID)",
		Short: "Release a hold taken by 'dlock hold', or remove every holder of a lock",
		Long: `With --hold, release the hold that a hold ID names (see 'dlock hold'), from
any process and any host that uses the same store, and print its key and
fencing token.

` + holdIDHelp + `

With --force, remove every holder of the lock KEY, whoever holds it, and
print how many holds were removed. This is for operators clearing a stuck
lock, such as one kept by 'dlock run --hold-at-least'. A holder that is
still running sees its lock as lost at its next renewal: 'dlock run' then
terminates its command and exits with status 76. Normally only the holder
releases a lock, which 'dlock run' does when its command exits; hence
--force is required.

Exit status: 0 on success (with --force also when nothing was held), 64 on a
usage error (a malformed hold ID, or KEY without --force, too), 69 if the
store cannot be reached or cannot do it, 76 if the hold of --hold is no
longer held (it was released, or its lease ended).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case force && cmd.Flags().Changed("hold"):
				return usagef("--force and --hold exclude each other: --force KEY removes every holder of KEY, --hold ID releases one hold")
			case force:
				if err := cobra.ExactArgs(1)(cmd, args); err != nil {
					return err
				}
				return a.withClient(func(ctx context.Context, c *dlock.Client) error {
					return a.forceRelease(ctx, c, args[0])
				})
			case len(args) == 1:
				return usagef("refusing to release lock %q without --force: only its holder releases a lock normally "+
					"('dlock run' does when its command exits, --hold ID releases a hold of 'dlock hold'); "+
					"--force removes every holder, and a holder still running loses its lock", args[0])
			case !h.given(cmd):
				return usagef("nothing to release: give --hold ID (or set %s) to release a hold of 'dlock hold', or --force KEY to remove every holder of KEY", holdIDEnv)
			}
			id, err := a.holdID(cmd, &h)
			if err != nil {
				return err
			}
			return a.withClient(func(ctx context.Context, c *dlock.Client) error {
				return a.releaseHold(ctx, c, id)
			})
		},
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "remove the holders of KEY, whoever they are")
	h.define(cmd)
	return cmd
}

func (a *app) forceRelease(ctx context.Context, c *dlock.Client, key string) error {
	n, err := c.ForceRelease(ctx, key)
	if err != nil {
		return storeError(fmt.Sprintf("cannot release lock%s", errtext.Keyed(key, err)), err)
	}
	holds := "holds"
	if n == 1 {
		holds = "hold"
	}
	fmt.Fprintf(a.stdout, "released %q: %d %s removed\n", key, n, holds)
	return nil
}
