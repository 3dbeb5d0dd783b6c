package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/dlockhq/dlock"
)

// Holder is one line of `dlock ls --json`.
type Holder struct {
	Key        string `json:"key"`
	Token      uint64 `json:"token"`
	Mode       string `json:"mode"`
	Limit      int    `json:"limit,omitempty"` // a semaphore's number of permits
	OwnerID    string `json:"owner_id"`        // the public identifier of the holder's owner token (dlock.OwnerID)
	Info       string `json:"info"`            // the holder's owner info, "host:pid" by default
	TimeLeftMS int64  `json:"time_left_ms"`    // time left on the lease, as the store sees it
}

func (a *app) lsCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls [PREFIX]",
		Short: "List the held locks",
		Long: `List the locks held in the store whose keys start with PREFIX (all locks
without it), one line per holder: key, fencing token, mode (exclusive, shared
for the readers of a read-write lock, semaphore/N for the permits of a
semaphore of N), owner (host:pid of the holder; the node's name for a
foreign client's lock on ZooKeeper) and the time left on the lease. With --json, print one JSON object per holder and line, with the
fields key, token, mode, limit (semaphores only), owner_id, info and
time_left_ms.

Exit status: 0 on success, 64 on a usage error, 69 if the store cannot be
reached or cannot list its locks.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			return a.withClient(func(ctx context.Context, c *dlock.Client) error {
				return a.ls(ctx, c, prefix, asJSON)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON lines instead of a table")
	return cmd
}

func (a *app) ls(ctx context.Context, c *dlock.Client, prefix string, asJSON bool) error {
	hs, err := c.List(ctx, prefix)
	if err != nil {
		return storeError("cannot list locks", err)
	}
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		for _, h := range hs {
			enc.Encode(Holder{Key: h.Key, Token: h.Token, Mode: h.Mode.String(), Limit: h.Limit, OwnerID: h.Owner, Info: h.Info, TimeLeftMS: h.TTL.Milliseconds()})
		}
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tTOKEN\tMODE\tOWNER\tTIME LEFT")
	for _, h := range hs {
		mode := h.Mode.String()
		if h.Limit > 0 {
			mode = fmt.Sprintf("%s/%d", mode, h.Limit)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", display(h.Key), h.Token, mode, display(h.Info), formatLeft(h.TTL))
	}
	tw.Flush()
	return nil
}

// formatLeft formats the time left on a lease to a readable precision.
func formatLeft(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}
