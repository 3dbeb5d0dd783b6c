package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/cmd/dlock/internal/check"
	"github.com/dlockhq/dlock/etcddlock"
	"github.com/dlockhq/dlock/internal/errtext"
	"github.com/dlockhq/dlock/ratelimit"
	"github.com/dlockhq/dlock/zkdlock"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Defaults of `dlock run`.
const (
	// DefaultRunTTL is the lease of the lock `dlock run` takes: if dlock dies
	// or loses the store, other hosts get the lock at most this long after
	// its last renewal. It is renewed every third of it while the command
	// runs.
	DefaultRunTTL = 30 * time.Second
	// DefaultKillAfter is the time between SIGTERM and SIGKILL when the lock
	// is lost.
	DefaultKillAfter = 10 * time.Second
)

type runOptions struct {
	key         string
	keys        keyFlag // every --key given: one is allowed
	ttl         time.Duration
	lockDelay   time.Duration // --lock-delay
	wait        time.Duration
	waitSet     bool // --wait was given; without it dlock waits forever
	holdAtLeast time.Duration
	maxHold     time.Duration
	maxHoldSet  bool // --max-hold was given; without it the hold has no bound
	killAfter   time.Duration
	limit       int           // --limit: a semaphore of this many permits
	limitSet    bool          // --limit was given
	shared      bool          // --shared: the read side of a read-write lock
	rate        string        // --rate N/DURATION, as given
	rateSet     bool          // --rate was given
	rateN       int           // --rate's N
	rateWindow  time.Duration // --rate's DURATION
	ttlSet      bool          // --ttl was given
	holdSet     bool          // --hold-at-least was given
	notDone     string        // what does not happen when the lock is not acquired
	quiet       bool          // --quiet: say nothing when the lock is not acquired
	conflict    int           // --conflict-exit-code: the status when the lock is not acquired
}

const runLong = `Run COMMAND while holding the lock KEY: a distributed flock(1).

dlock acquires the lock (waiting for it unless --wait says otherwise), runs
COMMAND with DLOCK_KEY and DLOCK_TOKEN added to its environment, renews the
lease every third of --ttl while COMMAND runs, releases the lock when COMMAND
exits and exits with COMMAND's status. DLOCK_TOKEN is the lock's fencing
token, a decimal number greater than that of every earlier holder of KEY:
pass it to the resource COMMAND writes to, so that it can reject writes from
a stale holder.

The lock is a lease: if dlock dies or cannot reach the store, the store frees
it --ttl (default 30s) after its last renewal. If the lease cannot be renewed
in time, or an operator forces its release, the lock is lost: dlock sends
SIGTERM to COMMAND's process group, SIGKILL --kill-after later (default 10s)
and to whatever is left of the group once COMMAND has exited, and exits with
status 76.

COMMAND runs in a process group of its own. dlock forwards SIGINT, SIGTERM,
SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to that group (each followed by SIGCONT,
so that a stopped COMMAND gets it too), waits for COMMAND to exit, releases
the lock and exits with COMMAND's status. If dlock is killed outright
(SIGKILL), COMMAND is killed too (Linux) and the lock expires after --ttl.

When stdin is the terminal and dlock runs in its foreground, COMMAND gets the
terminal's foreground, so that an editor or a prompt works and ^C goes to
COMMAND, and dlock takes it back when COMMAND exits. A stopped COMMAND (^Z)
keeps the lock, as with flock(1): dlock says so on stderr, takes the
terminal back, and waits; SIGCONT resumes COMMAND (with the terminal again),
and SIGTERM or ^C to dlock ends it.

With --limit N the key is a semaphore: up to N commands run at once, each
holding a permit of its own (every user of KEY must give the same N). With
--shared dlock takes the read side of a read-write lock on KEY: any number of
--shared commands run at once, while a run without --shared (the write side)
runs alone; once a writer waits, new readers wait behind it. Both need a store
that supports them natively (dlock says so otherwise, status 69).

With --rate N/DURATION (as in 3/1m) KEY is a rate limit rather than a lock:
COMMAND runs only if it is admitted, and at most N runs are admitted in any
DURATION, across hosts. An admitted run takes one of N slots, and the store
frees the slot DURATION after it granted it, however long COMMAND runs and
even if dlock exits at once. --wait 0 makes one attempt (status 75 when all
N slots are taken); --wait D waits up to D for a slot to free; without
--wait dlock waits for one. No lock is held while COMMAND runs (admitted
runs may overlap, and DLOCK_TOKEN is not set). Every user of KEY must give
the same N, and KEY should not also be used as a lock. --rate excludes
--limit, --shared, --ttl, --hold-at-least and --max-hold. A slot must
outlive dlock, so --rate needs a store whose leases do (status 69 on etcd
and ZooKeeper, whose holds end with dlock's session); a store without
semaphores (memcached, redlock) admits 1/DURATION only.

With --hold-at-least D the lock stays held until D after COMMAND started,
whatever COMMAND's exit status, even if COMMAND finished sooner (for a job
scheduled on several hosts, so that a host whose clock is late does not run it
again): dlock sets the lease to the time remaining and exits at once, and the
store frees the lock then. 'dlock release --force KEY' frees it earlier.

With --max-hold D the lock is held for at most D after it was acquired: dlock
then stops renewing it, terminates COMMAND as when the lock is lost (SIGTERM,
SIGKILL --kill-after later), releases the lock at once so that others can take
it, and exits with status 76. It bounds how long a COMMAND that hangs keeps
other hosts out; --hold-at-least cannot be longer.

Flags after COMMAND belong to COMMAND; "--" before COMMAND is optional.

Exit status:
  COMMAND's    COMMAND ran and exited; 128+N if signal N killed it
  64           usage error: a bad flag or argument (COMMAND did not run)
  69           the store cannot be opened or reached, or failed the last
               attempt before --wait ran out (COMMAND did not run)
  71           dlock could not wait for COMMAND (an OS error); it killed it
  75           the lock was not acquired: it is held and --wait 0 was given,
               or --wait ran out while it was held; with --rate, no slot
               was free (COMMAND did not run). --conflict-exit-code N
               makes it N, and --quiet silences its message
  76           the lock was lost, or --max-hold ran out, while COMMAND ran;
               COMMAND was terminated
  126, 127     COMMAND cannot be executed, or was not found
  128+N        dlock was interrupted by signal N while waiting for the lock
When the status is dlock's own, dlock says why on stderr.`

const runExample = `  # Serialise deploys across hosts that share a PostgreSQL database:
  DLOCK_URL=postgres://deploy@db.internal/ops dlock run --key deploy -- make deploy

  # At most 3 concurrent exports against the warehouse:
  dlock run --key warehouse-export --limit 3 -- ./export.sh

  # At most 3 calls to the partner's API per minute, across hosts; skip
  # this one if the limit is reached:
  dlock run --key partner-api --rate 3/1m --wait 0 -- ./sync.sh

  # Readers share the key; a migration (without --shared) runs alone:
  dlock run --key schema --shared -- ./read-report.sh
  dlock run --key schema -- ./migrate.sh

  # A cron job on several hosts: run it once, skip if it is running
  # elsewhere, and keep others off for 10 minutes after it started:
  dlock run --key nightly-report --wait 0 --hold-at-least 10m -- ./report.sh`

func (a *app) runCommand() *cobra.Command {
	o := runOptions{notDone: "command not run"}
	cmd := &cobra.Command{
		Use:     "run --key KEY [flags] [--] COMMAND [ARG...]",
		Short:   "Run a command while holding a lock (a distributed flock)",
		Long:    runLong,
		Example: runExample,
		Args:    cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.maxHoldSet = cmd.Flags().Changed("max-hold")
			o.rateSet = cmd.Flags().Changed("rate")
			o.ttlSet = cmd.Flags().Changed("ttl")
			o.holdSet = cmd.Flags().Changed("hold-at-least")
			if err := o.validate(cmd, args); err != nil {
				return err
			}
			return o.notAcquired(a.run(&o, args))
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false) // flags after COMMAND are COMMAND's
	o.lockFlags(f, DefaultRunTTL, "lease: the store frees the lock this long after its last renewal if dlock dies", "commands")
	f.DurationVar(&o.holdAtLeast, "hold-at-least", 0, "keep the lock until this long after COMMAND started, even if it finished sooner")
	f.DurationVar(&o.maxHold, "max-hold", 0, "terminate COMMAND and release the lock this long after it was acquired, as if it were lost (default: no bound)")
	f.DurationVar(&o.killAfter, "kill-after", DefaultKillAfter, "when the lock is lost, send SIGKILL this long after SIGTERM")
	f.StringVar(&o.rate, "rate", "", "run only if admitted by a rate limit on KEY of at most N runs in any DURATION (`N/DURATION`, e.g. 3/1m); excludes --limit, --shared, --ttl, --hold-at-least, --max-hold")
	return cmd
}

// lockFlags defines the flags that say which lock to take and how long to
// wait for it (--key, --ttl, --wait, --limit, --shared), for `dlock run`
// and `dlock hold`; holders names what holds the lock, in --limit's help.
func (o *runOptions) lockFlags(f *pflag.FlagSet, ttl time.Duration, ttlUsage, holders string) {
	f.VarP(&o.keys, "key", "k", "name of the lock (required; given once)")
	f.DurationVar(&o.ttl, "ttl", ttl, ttlUsage)
	f.DurationVar(&o.lockDelay, "lock-delay", 0, "if the holder stops renewing (paused, cut off, killed), keep the lock from others this long after its lease ended (a release frees it at once)")
	f.DurationVarP(&o.wait, "wait", "w", 0, "give up after waiting this long for the lock; 0 makes one attempt (default: wait forever)")
	f.IntVar(&o.limit, "limit", 0, "make KEY a semaphore: at most this many "+holders+" hold it at once")
	f.BoolVar(&o.shared, "shared", false, "take the read side of a read-write lock on KEY (shared with other --shared "+holders+")")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "print nothing when the lock is not acquired (for cron: a host that skips sends no mail)")
	f.IntVarP(&o.conflict, "conflict-exit-code", "E", ExitNotAcquired, "exit status when the lock is not acquired (held, or --wait ran out), as flock -E")
}

// notAcquired applies --quiet and --conflict-exit-code to err, the outcome
// of a command that did not acquire the lock (exit status ExitNotAcquired).
func (o *runOptions) notAcquired(err error) error {
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != ExitNotAcquired {
		return err
	}
	out := &exitError{code: o.conflict, err: ee.err}
	if o.quiet {
		out.err = nil
	}
	return out
}

// validateLock checks the flags of lockFlags.
func (o *runOptions) validateLock(cmd *cobra.Command) error {
	o.waitSet = cmd.Flags().Changed("wait")
	o.limitSet = cmd.Flags().Changed("limit")
	if len(o.keys) > 0 {
		o.key = o.keys[0]
	}
	switch {
	case len(o.keys) == 0:
		return usagef("--key is required")
	case len(o.keys) > 1:
		return usagef("--key given twice (%q, then %q): a command takes one lock", o.keys[0], o.keys[1])
	case o.key == "":
		return usagef("invalid --key %q: must not be empty", o.key)
	case o.ttl <= 0:
		return usagef("invalid --ttl %v: must be positive", o.ttl)
	case o.wait < 0:
		return usagef("invalid --wait %v: must not be negative (0 makes one attempt; leave --wait out to wait forever)", o.wait)
	case o.limitSet && o.limit < 1:
		return usagef("invalid --limit %d: must be at least 1", o.limit)
	case o.limitSet && o.shared:
		return usagef("--limit and --shared exclude each other: a key is a semaphore or a read-write lock")
	case o.conflict < 0 || o.conflict > 255:
		return usagef("invalid --conflict-exit-code %d: must be between 0 and 255", o.conflict)
	}
	return nil
}

func (o *runOptions) validate(cmd *cobra.Command, args []string) error {
	if err := o.validateLock(cmd); err != nil {
		return err
	}
	if err := o.validateHold(); err != nil {
		return err
	}
	switch {
	case len(args) == 0:
		return usagef("no command to run: give it after the flags, as in 'dlock run --key %s -- COMMAND [ARG...]'", o.key)
	case args[0] == "":
		return usagef("invalid command %q: must not be empty", args[0])
	}
	if o.rateSet {
		n, window, err := parseRate(o.rate)
		if err != nil {
			return usagef("invalid --rate %q: %v", o.rate, err)
		}
		o.rateN, o.rateWindow = n, window
	}
	return nil
}

// validateHold checks the flags that bound a hold, and that --rate comes
// without them.
func (o *runOptions) validateHold() error {
	switch {
	case o.holdAtLeast < 0:
		return usagef("invalid --hold-at-least %v: must not be negative", o.holdAtLeast)
	case o.maxHoldSet && o.maxHold <= 0:
		return usagef("invalid --max-hold %v: must be positive", o.maxHold)
	case o.maxHoldSet && o.holdAtLeast > o.maxHold:
		return usagef("invalid --hold-at-least %v: longer than --max-hold %v", o.holdAtLeast, o.maxHold)
	case o.killAfter < 0:
		return usagef("invalid --kill-after %v: must not be negative", o.killAfter)
	case o.rateSet && (o.limitSet || o.shared || o.ttlSet || o.holdSet || o.maxHoldSet || o.lockDelay != 0):
		return usagef("--rate excludes --limit, --shared, --ttl, --lock-delay, --hold-at-least and --max-hold: a key is a rate limit or a lock")
	}
	return nil
}

// parseRate parses --rate's N/DURATION: a decimal N of at least 1, a slash,
// and a positive Go duration with its unit.
func parseRate(s string) (int, time.Duration, error) {
	num, dur, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, errors.New("want N/DURATION, as in 3/1m")
	}
	if num == "" || strings.Trim(num, "0123456789") != "" {
		//lint:ignore ST1005 N and DURATION name the parts of --rate N/DURATION
		return 0, 0, fmt.Errorf("N %q is not a number", num)
	}
	n, err := strconv.Atoi(num)
	if err != nil {
		//lint:ignore ST1005 N and DURATION name the parts of --rate N/DURATION
		return 0, 0, fmt.Errorf("N %q is out of range", num)
	}
	if n < 1 {
		//lint:ignore ST1005 N and DURATION name the parts of --rate N/DURATION
		return 0, 0, fmt.Errorf("N %d must be at least 1", n)
	}
	window, err := time.ParseDuration(dur)
	if err != nil {
		return 0, 0, fmt.Errorf("DURATION %q is not a duration with a unit, as in 30s or 1m", dur)
	}
	if window <= 0 {
		return 0, 0, fmt.Errorf("DURATION %v must be positive", window)
	}
	return n, window, nil
}

// signalError is the cause of a wait ended by a signal.
type signalError struct{ sig os.Signal }

func (e *signalError) Error() string { return "interrupted by " + signalName(e.sig) }

func (a *app) run(o *runOptions, args []string) error {
	path, err := exec.LookPath(args[0])
	if err != nil {
		return exitf(cannotRunStatus(err), "cannot run %q: %v", args[0], err)
	}

	// Catch the signals from now on: until the lock is acquired they end
	// the wait (leaving nothing behind on the store); after that they are
	// forwarded to the command.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil) // not before: the store may keep the context Open got
	stopWatch := watchSignals(sigs, cancel)

	c, err := a.open(ctx, dlock.WithObserver(dlock.ObserverFunc(a.warnRenewal)))
	if err != nil {
		stopWatch()
		if se := interrupted(ctx); se != nil {
			return exitf(signalStatus(se.sig), "%s while opening the store; command not run", se)
		}
		return err
	}
	defer a.close(c)
	// The hold becomes a lease two resolution units longer (see
	// Lock.ReleaseAfter): refuse it now rather than after the command ran.
	if o.holdAtLeast > c.MaxReleaseAfter() {
		stopWatch()
		return usagef("invalid --hold-at-least %v: above this store's longest lease of %v", o.holdAtLeast, c.MaxReleaseAfter())
	}

	var l *dlock.Lock // nil with --rate: nothing is held while COMMAND runs
	if o.rateSet {
		err = a.admit(ctx, c, o)
	} else {
		l, err = a.acquire(ctx, c, o)
	}
	stopWatch()
	if se := interrupted(ctx); se != nil {
		_ = a.release(l, o.ttl)
		if o.rateSet {
			return exitf(signalStatus(se.sig), "%s while waiting for a slot of rate limit %q; command not run", se, o.key)
		}
		return exitf(signalStatus(se.sig), "%s while waiting for lock %q; command not run", se, o.key)
	}
	if err != nil {
		return err
	}
	return a.supervise(l, o, path, args, sigs)
}

// admit takes a slot of the --rate limit on KEY, as --wait says.
func (a *app) admit(ctx context.Context, c *dlock.Client, o *runOptions) error {
	switch c.Driver().(type) {
	case *etcddlock.Driver, *zkdlock.Driver:
		return exitf(ExitUnavailable, "--rate %s: this store does not support it: its holds end with dlock's session, so a slot would not outlive this run", o.rate)
	}
	lim, err := ratelimit.New(c, o.key, o.rateN, o.rateWindow)
	var ae *dlock.ArgError
	switch {
	case errors.As(err, &ae) && ae.Name == "key":
		return usagef("invalid --key %q: %s", o.key, ae.Reason)
	case errors.As(err, &ae):
		return usagef("invalid --rate %q: %s %v %s", o.rate, ae.Name, ae.Value, ae.Reason)
	case errors.Is(err, dlock.ErrUnsupported):
		return exitf(ExitUnavailable, "--rate %s: this store does not support it (%s); it admits 1/DURATION only", o.rate, message(err))
	case err != nil:
		return exitf(ExitUnavailable, "--rate %s: %s", o.rate, message(err))
	}
	begin := time.Now()
	switch {
	case o.waitSet && o.wait == 0:
		var ok bool
		if ok, err = lim.Allow(ctx); err == nil && !ok {
			return exitf(ExitNotAcquired, "rate limit %q of %s reached: no slot is free; command not run (--wait 0)", o.key, o.rate)
		}
	case !o.waitSet:
		a.log.Debug("waiting for a slot of the rate limit", "key", o.key, "rate", o.rate)
		err = lim.Wait(ctx)
	default:
		a.log.Debug("waiting for a slot of the rate limit", "key", o.key, "rate", o.rate, "wait", o.wait)
		wctx, wcancel := context.WithTimeout(ctx, o.wait)
		err = lim.Wait(wctx)
		wcancel()
	}
	if err != nil {
		return notAdmitted(ctx, c, o, err)
	}
	a.log.Debug("admitted by the rate limit", "key", o.key, "rate", o.rate, "waited", time.Since(begin))
	return nil
}

// notAdmitted returns how dlock exits when taking a slot failed with err.
func notAdmitted(ctx context.Context, c *dlock.Client, o *runOptions, err error) error {
	switch {
	case interrupted(ctx) != nil:
		return err // run reports it
	case errors.Is(err, dlock.ErrModeMismatch):
		return exitf(ExitNotAcquired, "rate limit%s is in use in another mode or with another N%s: %v; command not run", errtext.Keyed(o.key, err), holderOf(c, o.key), message(err))
	case errors.Is(err, dlock.ErrUnavailable):
		return exitf(ExitUnavailable, "cannot take a slot of rate limit%s: %v; command not run", errtext.Keyed(o.key, err), message(err))
	case errors.Is(err, dlock.ErrLost):
		// The slot ended before it could be kept: not admitted.
		return exitf(ExitNotAcquired, "rate limit%s of %s: %v; command not run", errtext.Keyed(o.key, err), o.rate, message(err))
	case errors.Is(err, dlock.ErrNotAcquired):
		return exitf(ExitNotAcquired, "rate limit %q of %s: no slot freed after waiting %v; command not run", o.key, o.rate, o.wait)
	default:
		return exitf(ExitUnavailable, "cannot take a slot of rate limit%s: %v; command not run", errtext.Keyed(o.key, err), message(err))
	}
}

// cannotRunStatus returns the exit status for a command that could not be
// started, as shells report it: 127 if it does not exist (not in $PATH, no
// such file, or a script whose interpreter does not exist), 126 if it exists
// but cannot be executed (permission denied, a directory, a path through a
// file, not an executable format).
func cannotRunStatus(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return ExitNotFound
	}
	return ExitCannotRun
}

// watchSignals cancels ctx (through cancel) with a *signalError when a
// signal arrives on sigs, until the returned function is called; that
// function returns once the watch has stopped, so that no signal is lost
// between the watch and what follows.
func watchSignals(sigs <-chan os.Signal, cancel context.CancelCauseFunc) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case sig := <-sigs:
			cancel(&signalError{sig})
		case <-done:
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
}

// interrupted returns the signal that cancelled ctx, if any.
func interrupted(ctx context.Context) *signalError {
	var se *signalError
	if errors.As(context.Cause(ctx), &se) {
		return se
	}
	return nil
}

// acquire takes the lock as --wait says.
func (a *app) acquire(ctx context.Context, c *dlock.Client, o *runOptions) (*dlock.Lock, error) {
	opts := []dlock.LockOption{dlock.WithTTL(o.ttl)}
	if o.lockDelay != 0 {
		opts = append(opts, dlock.WithLockDelay(o.lockDelay))
	}
	if o.limitSet {
		opts = append(opts, dlock.WithLimit(o.limit))
	}
	if o.shared {
		opts = append(opts, dlock.Shared())
	}
	if o.maxHoldSet {
		opts = append(opts, dlock.WithMaxHold(o.maxHold))
	}
	var l *dlock.Lock
	var err error
	begin := time.Now()
	switch {
	case !o.waitSet:
		a.log.Debug("waiting for the lock", "key", o.key)
		stop := a.waitingNotice(c, o.key)
		l, err = c.Lock(ctx, o.key, opts...)
		stop()
	case o.wait == 0:
		l, err = c.TryLock(ctx, o.key, opts...)
	default:
		a.log.Debug("waiting for the lock", "key", o.key, "wait", o.wait)
		wctx, wcancel := context.WithTimeout(ctx, o.wait)
		stop := a.waitingNotice(c, o.key)
		l, err = c.Lock(wctx, o.key, opts...)
		stop()
		wcancel()
	}
	switch {
	case err == nil:
		a.log.Debug("acquired the lock", "key", o.key, "token", l.Token(), "waited", time.Since(begin))
		return l, nil
	case interrupted(ctx) != nil:
		return nil, err // run reports it
	case errors.Is(err, dlock.ErrInvalidArgument):
		return nil, o.flagError(err)
	case errors.Is(err, dlock.ErrModeMismatch):
		return nil, exitf(ExitNotAcquired, "lock%s is in use in another mode%s: %v; %s", errtext.Keyed(o.key, err), holderOf(c, o.key), message(err), o.notDone)
	case errors.Is(err, dlock.ErrUnavailable):
		// The store failed, on the last attempt of a wait too: the lock
		// may well be free.
		return nil, exitf(ExitUnavailable, "cannot acquire lock%s: %v; %s", errtext.Keyed(o.key, err), message(err), o.notDone)
	case errors.Is(err, dlock.ErrNotAcquired) && o.waitSet && o.wait == 0:
		return nil, exitf(ExitNotAcquired, "lock %q is held%s; %s (--wait 0)", o.key, holderOf(c, o.key), o.notDone)
	case errors.Is(err, dlock.ErrNotAcquired):
		return nil, exitf(ExitNotAcquired, "lock %q is still held%s after waiting %v; %s", o.key, holderOf(c, o.key), o.wait, o.notDone)
	default:
		return nil, exitf(ExitUnavailable, "cannot acquire lock%s: %v; %s", errtext.Keyed(o.key, err), message(err), o.notDone)
	}
}

// flagError turns an *dlock.ArgError about the lock's key, TTL, limit or delay
// into a usage error naming the flag it came from and the value given, so
// that `--ttl 100000h` is reported as "invalid --ttl 100000h0m0s: is above
// this backend's maximum of 168h0m0s". Other invalid arguments are usage
// errors as they are.
func (o *runOptions) flagError(err error) error {
	var ae *dlock.ArgError
	if errors.As(err, &ae) {
		switch ae.Name {
		case "ttl":
			return usagef("invalid --ttl %v: %s", o.ttl, ae.Reason)
		case "key":
			return usagef("invalid --key %q: %s", o.key, ae.Reason)
		case "limit":
			return usagef("invalid --limit %d: %s", o.limit, ae.Reason)
		case "max hold":
			return usagef("invalid --max-hold %v: %s", o.maxHold, ae.Reason)
		case "lock delay":
			return usagef("invalid --lock-delay %v: %s", o.lockDelay, ae.Reason)
		}
	}
	return &usageError{err}
}

// holderOf describes the holder of key for a message, best effort.
func holderOf(c *dlock.Client, key string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	hs, err := c.Holders(ctx, key)
	if err != nil || len(hs) == 0 {
		return ""
	}
	h := hs[0]
	return fmt.Sprintf(" by %s (token %d, lease ends in %s)", display(h.Info), h.Token, formatLeft(h.TTL))
}

// waitingNoticeAfter is how long a wait lasts before dlock says on a
// terminal what it waits for.
const waitingNoticeAfter = time.Second

// waitingNotice prints one line on stderr, if it is a terminal, once a wait
// for key has lasted waitingNoticeAfter: what dlock waits for and who holds
// it. The returned function ends the watch (and waits for a line being
// printed), before the acquisition's outcome is reported.
func (a *app) waitingNotice(c *dlock.Client, key string) (stop func()) {
	f, ok := a.stderr.(*os.File)
	if !ok || !check.IsTerminal(f) {
		return func() {}
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTimer(waitingNoticeAfter)
		defer t.Stop()
		select {
		case <-t.C:
			a.logf("waiting for %q, held%s", key, holderOf(c, key))
		case <-done:
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

// warnRenewal reports, with or without --verbose, a renewal of the lock that
// failed: the lock stays valid until its lease runs out, and dlock keeps
// trying until then.
func (a *app) warnRenewal(e dlock.Event) {
	if e.Kind == dlock.EventRenewFailed {
		a.logf("warning: renewing lock%s failed (%v); retrying while its lease lasts", errtext.Keyed(e.Key, e.Err), message(e.Err))
	}
}

// release releases l, if any, reporting a failure on stderr; the store
// frees the lock at the end of its lease anyway.
func (a *app) release(l *dlock.Lock, timeout time.Duration) error {
	if l == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := l.Release(ctx)
	if err != nil && !errors.Is(err, dlock.ErrLost) {
		a.logf("warning: cannot release lock%s (%v); the store frees it when its lease ends", errtext.Keyed(l.Key(), err), message(err))
	}
	return err
}

// supervise runs the command while l is held and returns how dlock exits.
func (a *app) supervise(l *dlock.Lock, o *runOptions, path string, args []string, sigs <-chan os.Signal) error {
	cmd, tty := a.command(l, o, path, args)
	// Watch for the command stopping from before it starts.
	changed := make(chan os.Signal, 1)
	if len(childSignals) > 0 {
		signal.Notify(changed, childSignals...)
		defer signal.Stop(changed)
	}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		_ = a.release(l, o.ttl)
		return exitf(cannotRunStatus(err), "cannot run %q: %v", args[0], err)
	}
	pid := cmd.Process.Pid
	attrs := []any{"key", o.key}
	if l != nil {
		attrs = append(attrs, "token", l.Token())
	}
	a.log.Debug("started the command", append(attrs, "pid", pid, "terminal", tty != nil)...)
	if tty != nil {
		// Take the terminal back however the command ends: dlock may
		// still print, and the shell expects its job's group to have it.
		defer func() {
			if err := tty.reclaim(); err != nil {
				a.log.Debug("cannot take the terminal back", "err", err)
			}
		}()
	}
	lost, waitErr := a.watch(cmd, tty, l, o, sigs, changed)
	if cmd.ProcessState == nil {
		// Waiting itself failed: the command's fate is unknown.
		_ = signalGroup(pid, sigKill)
		_ = a.release(l, o.ttl)
		return exitf(ExitOSError, "waiting for the command: %v; killed it", waitErr)
	}
	status := exitStatus(cmd.ProcessState)
	a.log.Debug("the command exited", "key", o.key, "status", status, "ran", time.Since(started))
	switch {
	case l == nil: // --rate: the slot lasts its window whatever happens now.
	case lost: // nothing of the command may keep running
		_ = signalGroup(pid, sigKill)
		_ = a.release(l, o.ttl) // clears whatever may remain; the loss stands
		if errors.Is(l.Cause(), dlock.ErrMaxHold) {
			return exitf(ExitLost, "lock %q reached --max-hold %v: the command was terminated (its status was %d)", o.key, o.maxHold, status)
		}
		return exitf(ExitLost, "lock %q was lost: the command was terminated (its status was %d)", o.key, status)
	default:
		if err := a.releaseAfterCommand(l, o, started, status); err != nil {
			return err
		}
	}
	if status == 0 {
		return nil
	}
	return &exitError{code: status}
}

// command returns the command to run, with the key and the lock's token in
// its environment, and the terminal whose foreground it gets, if any.
func (a *app) command(l *dlock.Lock, o *runOptions, path string, args []string) (*exec.Cmd, *terminal) {
	cmd := exec.Command(path, args[1:]...)
	cmd.Args[0] = args[0]
	cmd.Env = append(os.Environ(), "DLOCK_KEY="+o.key)
	if l != nil {
		cmd.Env = append(cmd.Env, "DLOCK_TOKEN="+strconv.FormatUint(l.Token(), 10))
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = a.stdin, a.stdout, a.stderr
	cmd.SysProcAttr = sysProcAttr()
	// Only matters when a stream is not a file (Main called from Go): do
	// not wait forever for the command's children to close a pipe.
	cmd.WaitDelay = time.Second
	tty := foregroundTerminal(a.stdin)
	if tty != nil {
		tty.attach(cmd.SysProcAttr)
	}
	return cmd, tty
}

// watch waits for the started command to exit, forwarding it the signals
// dlock gets (sigs) and following its stops (changed). When l is lost it
// sends the command SIGTERM, and SIGKILL --kill-after later. It returns
// whether l was lost, and the command's Wait error.
func (a *app) watch(cmd *exec.Cmd, tty *terminal, l *dlock.Lock, o *runOptions, sigs, changed <-chan os.Signal) (lost bool, err error) {
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	pid := cmd.Process.Pid
	var lockDone <-chan struct{} // never ready without a lock
	if l != nil {
		lockDone = l.Done()
	}
	var killC <-chan time.Time
	for {
		select {
		case err := <-exited:
			return lost, err
		case sig := <-sigs:
			a.log.Debug("forwarding a signal to the command", "signal", signalName(sig), "pgid", pid)
			if err := a.signalCommand(pid, sig); err != nil {
				a.logf("cannot forward %s to the command: %v", signalName(sig), err)
			}
		case <-changed:
			a.commandChanged(pid, tty, o.key)
		case <-lockDone:
			lockDone, lost = nil, true
			if errors.Is(l.Cause(), dlock.ErrMaxHold) {
				a.logf("lock %q reached --max-hold %v while the command ran; sending SIGTERM to the command, SIGKILL in %v", o.key, o.maxHold, o.killAfter)
			} else {
				cause := context.Cause(l.Context())
				a.logf("lock%s lost while the command ran (%v); sending SIGTERM to the command, SIGKILL in %v", errtext.Keyed(o.key, cause), message(cause), o.killAfter)
			}
			if err := a.signalCommand(pid, sigTerm); err != nil {
				a.logf("cannot send SIGTERM to the command: %v", err)
			}
			killC = time.After(o.killAfter)
		case <-killC:
			killC = nil
			a.logf("the command is still running %v after SIGTERM; sending SIGKILL", o.killAfter)
			if err := signalGroup(pid, sigKill); err != nil {
				a.logf("cannot send SIGKILL to the command: %v", err)
			}
		}
	}
}

// releaseAfterCommand releases l after the command, started at started,
// exited with status; with --hold-at-least it leaves l to a lease that ends
// when that time has passed. It returns an error if l was lost meanwhile.
func (a *app) releaseAfterCommand(l *dlock.Lock, o *runOptions, started time.Time, status int) error {
	rctx, cancel := context.WithTimeout(context.Background(), o.ttl)
	defer cancel()
	var err error
	if hold := o.holdAtLeast - time.Since(started); hold > 0 {
		err = l.ReleaseAfter(rctx, hold)
		if err == nil {
			a.log.Debug("leaving the lock to its lease", "key", o.key, "for", hold)
		}
	} else {
		err = l.Release(rctx)
		if err == nil {
			a.log.Debug("released the lock", "key", o.key)
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, dlock.ErrLost):
		return exitf(ExitLost, "lock%s was lost before the command finished (%v); its status was %d", errtext.Keyed(o.key, err), message(err), status)
	default:
		a.logf("warning: cannot release lock%s (%v); the store frees it when its lease ends", errtext.Keyed(o.key, err), message(err))
	}
	return nil
}

// signalCommand sends sig to the command's process group, then SIGCONT, so
// that a stopped group gets it too (as shells do when they kill a stopped
// job).
func (a *app) signalCommand(pgid int, sig os.Signal) error {
	if err := signalGroup(pgid, sig); err != nil {
		return err
	}
	if sigCont != nil && sig != sigCont && sig != sigKill {
		return signalGroup(pgid, sigCont)
	}
	return nil
}

// childEvent is a change in the command's state that `dlock run` acts on.
type childEvent int

const (
	childNone      childEvent = iota
	childStopped              // stopped by a signal: ^Z, SIGTTIN, SIGSTOP
	childContinued            // continued by SIGCONT
)

// commandChanged acts on the command stopping or continuing (on Linux;
// elsewhere dlock is not told and waits, as flock(1) does).
//
// A stopped command keeps the lock and dlock waits for it, as flock(1)
// does, but says so on stderr, takes the terminal back if the command had it
// (so that ^C reaches dlock) and forwards the signals it gets with a SIGCONT,
// so that SIGTERM or ^C ends a stopped command. (dlock does not stop itself
// to hand the stop to a job-control shell: the shell would then continue
// dlock and the command in a race over the terminal.)
func (a *app) commandChanged(pid int, tty *terminal, key string) {
	for range 16 { // signals coalesce: report every change so far, boundedly
		switch nextChildEvent(pid) {
		case childNone:
			return
		case childStopped:
			if tty != nil {
				_ = tty.reclaim()
			}
			a.logf("the command (pid %d) was stopped; lock %q stays held until it exits: send it SIGCONT to resume it, "+
				"or SIGTERM or SIGINT to dlock (pid %d) to end it", pid, key, os.Getpid())
		case childContinued:
			// Resumed by someone else: give it back the terminal
			// dlock took when it stopped.
			if tty != nil && tty.ours() {
				if err := tty.give(pid); err != nil {
					a.log.Debug("cannot give the terminal to the command", "err", err)
				}
			}
		}
	}
}

// keyFlag is --key. It keeps every value given, so that a second --key,
// which would silently win over the first, is refused when the flags are
// checked: refusing it while they are parsed would break shell completion,
// which parses the same flags twice.
type keyFlag []string

func (k *keyFlag) String() string {
	if len(*k) == 0 {
		return ""
	}
	return (*k)[0]
}

func (k *keyFlag) Type() string { return "string" }

func (k *keyFlag) Set(v string) error {
	*k = append(*k, v)
	return nil
}
