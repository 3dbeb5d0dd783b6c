package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/dlockhq/dlock"
)

func (a *app) releaseCommand() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "release --force KEY",
		Short: "Remove every holder of a lock (operators only)",
		Long: `Remove every holder of the lock KEY, whoever holds it, and print how many
holds were removed. This is for operators clearing a stuck lock, such as one
kept by 'dlock run --hold-at-least'. A holder that is still running sees its
lock as lost at its next renewal: 'dlock run' then terminates its command and
exits with status 76. Normally only the holder releases a lock, which
'dlock run' does when its command exits; hence --force is required.

Exit status: 0 on success (also when nothing was held), 64 on a usage error
or without --force, 69 if the store cannot be reached or cannot force a
release.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !force {
				return usagef("refusing to release lock %q without --force: only its holder releases a lock normally "+
					"('dlock run' does when its command exits); --force removes every holder, and a holder still running loses its lock", args[0])
			}
			return a.withClient(func(ctx context.Context, c *dlock.Client) error {
				return a.forceRelease(ctx, c, args[0])
			})
		},
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "remove the holders, whoever they are (required)")
	return cmd
}

func (a *app) forceRelease(ctx context.Context, c *dlock.Client, key string) error {
	n, err := c.ForceRelease(ctx, key)
	if err != nil {
		return storeError(fmt.Sprintf("cannot release lock %q", key), err)
	}
	holds := "holds"
	if n == 1 {
		holds = "hold"
	}
	fmt.Fprintf(a.stdout, "released %q: %d %s removed\n", key, n, holds)
	return nil
}
