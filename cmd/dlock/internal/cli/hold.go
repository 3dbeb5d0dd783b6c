package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/errtext"
)

// holdIDEnv names the environment variable that gives the hold ID to
// `dlock extend` and `dlock release` when --hold is not given.
const holdIDEnv = "DLOCK_HOLD"

// holdIDHelp says where a hold ID comes from, for the help of the commands
// that deal with one.
const holdIDHelp = `'dlock extend' and 'dlock release' take the hold ID from --hold ID; from
the first line of stdin with --hold -; or, without --hold, from the
DLOCK_HOLD environment variable. A hold ID is a secret: whoever has it can
extend or release the hold, though not choose its fencing token, mode or
limit (they are read from the store; an ID whose token, mode or limit was
edited is refused as malformed). Other users of the host can see a command's
arguments (ps), though not its environment or stdin: prefer --hold - or
DLOCK_HOLD. dlock never prints a hold ID except on the stdout of 'dlock
hold'.`

const holdLong = `Take the lock KEY and leave it held after dlock exits, for --ttl (required),
and print its hold ID on stdout: a secret string that 'dlock extend' and
'dlock release --hold' take, from any process and any host that uses the
same store. Nothing renews the hold: it ends when its lease does, unless it
is extended or released first. 'dlock release --force KEY' also ends it.

--wait, --limit and --shared work as in 'dlock run'.

Stores whose holds end with the session of the process that took them
(etcd, ZooKeeper) cannot keep a hold after dlock exits: dlock says so, and
exits with status 69 without taking the lock.

` + holdIDHelp + `

Exit status:
  0     the lock is held; its hold ID is on stdout
  64    usage error: a bad flag or argument
  69    the store cannot be opened or reached, or cannot keep a hold after
        dlock exits
  75    the lock was not acquired: it is held and --wait 0 was given, or
        --wait ran out while it was held
  128+N dlock was interrupted by signal N while waiting for the lock`

const holdExample = `  # Hold a phone number for a buyer for 15 minutes:
  id=$(dlock hold --key phone:5550100 --ttl 15m --wait 0) || exit
  # ... later, anywhere the hold ID is known:
  printf '%s\n' "$id" | dlock extend --hold - --ttl 10m
  DLOCK_HOLD=$id dlock release`

func (a *app) holdCommand() *cobra.Command {
	o := runOptions{notDone: "no hold taken"}
	cmd := &cobra.Command{
		Use:     "hold --key KEY --ttl DURATION [flags]",
		Short:   "Take a lock that outlives dlock and print its hold ID",
		Long:    holdLong,
		Example: holdExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("key") && !cmd.Flags().Changed("ttl") {
				return usagef("--ttl is required: the hold lasts that long unless it is extended or released")
			}
			if err := o.validateLock(cmd); err != nil {
				return err
			}
			return o.notAcquired(a.hold(&o))
		},
	}
	o.lockFlags(cmd.Flags(), 0, "how long the hold lasts (required)", "holders")
	return cmd
}

func (a *app) hold(o *runOptions) error {
	// A signal ends the wait for the lock, leaving nothing behind.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	stopWatch := watchSignals(sigs, cancel)
	defer stopWatch()

	c, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if !c.Capabilities().PortableHolds {
		return exitf(ExitUnavailable, "cannot hold lock %q after dlock exits: this store's holds end with the session of the process "+
			"that took them (etcd, ZooKeeper); use 'dlock run' to hold it while a command runs", o.key)
	}
	l, err := a.acquire(ctx, c, o)
	stopWatch()
	if se := interrupted(ctx); se != nil {
		if l != nil {
			_ = a.release(l, o.ttl)
		}
		return exitf(signalStatus(se.sig), "%s while waiting for lock %q; no hold taken", se, o.key)
	}
	if err != nil {
		return err
	}
	id := l.HoldID()
	if err := l.Detach(); err != nil {
		_ = a.release(l, o.ttl)
		return storeError(fmt.Sprintf("cannot hold lock%s after dlock exits", errtext.Keyed(o.key, err)), err)
	}
	a.log.Debug("holding the lock", "key", o.key, "token", l.Token(), "ttl", o.ttl)
	fmt.Fprintln(a.stdout, id)
	return nil
}

// holdFlag is the --hold flag of the commands that act on a hold.
type holdFlag struct{ value string }

func (h *holdFlag) define(cmd *cobra.Command) {
	cmd.Flags().StringVar(&h.value, "hold", "", "the hold ID that 'dlock hold' printed; - reads it from stdin (default: $"+holdIDEnv+")")
}

// given reports whether the hold ID comes from --hold or the environment.
func (h *holdFlag) given(cmd *cobra.Command) bool {
	return cmd.Flags().Changed("hold") || env(holdIDEnv) != ""
}

// id returns the hold ID: --hold's value, the first line of stdin for
// --hold -, or $DLOCK_HOLD.
func (a *app) holdID(cmd *cobra.Command, h *holdFlag) (string, error) {
	switch {
	case !cmd.Flags().Changed("hold"):
		if id := env(holdIDEnv); id != "" {
			return id, nil
		}
		return "", usagef("no hold ID: give --hold ID, --hold - to read it from stdin, or set %s", holdIDEnv)
	case h.value == "-":
		line, err := readLine(a.stdin, 4096)
		if err != nil {
			return "", usagef("cannot read the hold ID from stdin: %v", err)
		}
		if line == "" {
			return "", usagef("no hold ID on stdin (--hold -)")
		}
		return line, nil
	case strings.TrimSpace(h.value) == "":
		return "", usagef("invalid --hold: must not be empty")
	}
	return h.value, nil
}

// readLine reads the first line of r, at most limit bytes, without its
// surrounding blanks.
func readLine(r io.Reader, limit int) (string, error) {
	if r == nil {
		return "", nil
	}
	b, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return "", err
	}
	if len(b) > limit {
		return "", fmt.Errorf("longer than %d bytes", limit)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line), nil
}

// holdError turns an error of an operation on a hold into an exitError:
// a bad hold ID is a usage error, a hold that is no longer held exits with
// ExitLost, and the rest makes the store unavailable.
func holdError(what string, err error) error {
	switch {
	case errors.Is(err, dlock.ErrNotHeld), errors.Is(err, dlock.ErrLost):
		return exitf(ExitLost, "%s: %s", what, message(err))
	case errors.Is(err, dlock.ErrInvalidArgument):
		return &exitError{code: ExitUsage, err: fmt.Errorf("%s: %s", what, message(err))}
	}
	return storeError(what, err)
}

func (a *app) extendCommand() *cobra.Command {
	var h holdFlag
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "extend [--hold ID] [--ttl DURATION]",
		Short: "Extend a hold taken by 'dlock hold'",
		Long: `Set the lease of the hold that a hold ID names (see 'dlock hold') to --ttl
from now, or to the --ttl it was taken with if --ttl is not given, and print
its key, fencing token and the time it is held for. It works from any
process and any host that uses the same store. A shorter --ttl shortens the
hold.

` + holdIDHelp + `

Exit status: 0 on success, 64 on a usage error (a malformed hold ID too),
69 if the store cannot be reached or cannot keep a hold after dlock exits,
76 if the hold is no longer held (it was released, or its lease ended).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := a.holdID(cmd, &h)
			if err != nil {
				return err
			}
			opts := []dlock.LockOption{dlock.WithoutRenewal()}
			if cmd.Flags().Changed("ttl") {
				if ttl <= 0 {
					return usagef("invalid --ttl %v: must be positive", ttl)
				}
				opts = append(opts, dlock.WithTTL(ttl))
			}
			return a.withClient(func(ctx context.Context, c *dlock.Client) error {
				const what = "cannot extend the hold"
				l, err := c.Resume(ctx, id, opts...)
				var ae *dlock.ArgError
				switch {
				case errors.As(err, &ae) && ae.Name == "ttl":
					return usagef("invalid --ttl %v: %s", ttl, ae.Reason)
				case err != nil:
					return holdError(what, err)
				}
				if err := l.Detach(); err != nil {
					return holdError(what, err)
				}
				fmt.Fprintf(a.stdout, "extended %q (token %d): held for %v\n", l.Key(), l.Token(), l.TTL())
				return nil
			})
		},
	}
	h.define(cmd)
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "hold it for this long from now (default: the --ttl it was taken with)")
	return cmd
}

// releaseHold releases the hold that id names.
func (a *app) releaseHold(ctx context.Context, c *dlock.Client, id string) error {
	const what = "cannot release the hold"
	l, err := c.Resume(ctx, id, dlock.WithoutRenewal())
	if err != nil {
		return holdError(what, err)
	}
	if err := l.Release(ctx); err != nil {
		return holdError(what, err)
	}
	fmt.Fprintf(a.stdout, "released %q (token %d)\n", l.Key(), l.Token())
	return nil
}
