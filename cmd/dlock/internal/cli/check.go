package cli

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dlockhq/dlock/cmd/dlock/internal/check"
	"github.com/spf13/cobra"
)

// Defaults of `dlock check`: a run of about 10 to 20 seconds.
const (
	DefaultCheckWorkers  = 4
	DefaultCheckDuration = 10 * time.Second
	DefaultCheckTTL      = 2 * time.Second
	// DefaultCheckHold is the work a holder does between reading and
	// writing the counter, so that a pause strikes inside a hold.
	DefaultCheckHold = 10 * time.Millisecond
)

// ExitCheckFailed is the status of a `dlock check` that saw the store break
// a promise of its backend.
const ExitCheckFailed = 1

// checkWorkerCommand is the hidden subcommand that runs one worker process
// of `dlock check`.
const checkWorkerCommand = "check-worker"

const checkLong = `Prove what a lock store guarantees: run a lost-update workload against it,
inject the faults a client can cause, and report what held.

WORKERS processes (dlock itself) loop for DURATION: acquire the key
dlock-check with a lease of TTL, read a counter, work for HOLD, write it plus
one (a deliberately non-atomic read-modify-write, so that two holders at once
lose an update), write the lock's fencing token to a register that rejects a
token lower than the highest it accepted, release. The counter and the
register live in the lock store under a key of their own (a Redis hash with a
Lua script, an SQL row with a conditional UPDATE in the table dlock_check,
etcd keys with a Txn, znodes with their version, memcached items with cas,
NATS key-value keys with their revision),
or in the store given by --resource. They are removed at the end unless
--keep is given.

Meanwhile dlock pauses the holder past its lease (SIGSTOP, then SIGCONT),
cuts a holder off from the store through a local TCP proxy, adds 50ms of
latency to a worker's traffic, and kills a holder with SIGKILL, timing the
takeover. (The proxy faults need a store named by host:port addresses. On
etcd and ZooKeeper a stopped or cut-off client keeps its locks until its
session ends: the pause and the cut last one and a half sessions, so give
the URL a short session=, such as ?session=5s, for a quick check.)

The report counts acquisitions, holds that overlapped (timed on the host's
monotonic clock), lost updates, stale writes the register accepted, holders
taken over that had their lost signal first, the takeover time after a kill,
and what the backend's capability flags promise; --json prints it as JSON.

With --audit, dlock runs no workload: it reads the deployment's settings
(Redis persistence, eviction and replicas; PostgreSQL synchronous_commit,
fsync and a pooler in transaction mode; MySQL
innodb_flush_log_at_trx_commit and sync_binlog; etcd versions and the lease
the cluster grants a session; the ZooKeeper session timeout the server
negotiated; the servers of a Redlock; memcached evictions and flush_all;
the NATS bucket's replicas and storage, its servers' versions and
sync_interval; the clock of every server that shows one, against this
host's) and says, per finding, what can go wrong and how to fix it. A
finding "breaks" a promise of the backend, or is a "risk" beyond what it
promises.

Exit status:
  0    everything the backend promises held (--audit: no finding breaks
       a promise)
  1    a promise was broken: a worker acquired the lock while another's was
       still valid, an update was lost with no holder to blame, a stale
       write was accepted where tokens are durable, or a holder taken over
       was never told (--audit: a setting breaks a promise)
  64   usage error
  69   the store cannot be opened or reached, or another check is running
  130  interrupted (the report covers the run so far)`

func (a *app) checkCommand() *cobra.Command {
	cfg := check.Config{Workers: DefaultCheckWorkers, Duration: DefaultCheckDuration, TTL: DefaultCheckTTL, Hold: DefaultCheckHold}
	var asJSON, audit bool
	var faults string
	cmd := &cobra.Command{
		Use:   "check [--url URL] [flags]",
		Short: "Prove what a lock store guarantees under faults",
		Long:  checkLong,
		Example: `  dlock check --url redis://127.0.0.1:6379
  dlock check --url etcd://10.0.0.1:2379,10.0.0.2:2379?session=5s --duration 30s --json
  dlock check --audit --url redis://10.0.0.5:6379`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if audit {
				for _, name := range []string{"workers", "duration", "ttl", "lock-delay", "hold", "resource", "faults", "keep"} {
					if cmd.Flags().Changed(name) {
						return usagef("--%s cannot be given with --audit, which runs no workload", name)
					}
				}
				return a.audit(asJSON)
			}
			cfg.Faults = nil
			if faults != "none" {
				for _, f := range strings.Split(faults, ",") {
					if f = strings.TrimSpace(f); f != "" {
						cfg.Faults = append(cfg.Faults, f)
					}
				}
			}
			return a.check(cfg, asJSON)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Workers, "workers", DefaultCheckWorkers, "number of worker processes")
	f.DurationVar(&cfg.Duration, "duration", DefaultCheckDuration, "how long the workload runs (longer if the faults need it)")
	f.DurationVar(&cfg.TTL, "ttl", DefaultCheckTTL, "lease of the workers' locks")
	f.DurationVar(&cfg.LockDelay, "lock-delay", 0, "lock delay of the workers' locks: a holder that stops renewing keeps the lock from others this long after its lease ended")
	f.DurationVar(&cfg.Hold, "hold", DefaultCheckHold, "time each worker spends holding the lock between reading and writing the counter")
	f.StringVar(&cfg.Resource, "resource", "", "URL of a store for the protected counter and register (default: the lock store)")
	f.StringVar(&faults, "faults", strings.Join(check.AllFaults, ","), `faults to inject, comma-separated, or "none"`)
	f.BoolVar(&cfg.Keep, "keep", false, "leave the counter and the register in the store")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.BoolVar(&audit, "audit", false, "read the deployment's settings and report those that can lose a lock, instead of running the workload")
	return cmd
}

// audit runs `dlock check --audit`.
func (a *app) audit(asJSON bool) error {
	raw, err := a.storeURL()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	rep, err := check.Audit(ctx, raw)
	var ue *check.UsageError
	switch {
	case errors.As(err, &ue):
		return usagef("%s", message(ue))
	case err != nil:
		return exitf(ExitUnavailable, "cannot audit the store: %s", message(err))
	}
	if asJSON {
		err = rep.WriteJSON(a.stdout)
	} else {
		err = rep.WriteText(a.stdout)
	}
	switch {
	case err != nil:
		return exitf(ExitUnavailable, "writing the report: %v", err)
	case !rep.OK:
		return &exitError{code: ExitCheckFailed}
	}
	return nil
}

func (a *app) checkWorkerCommand() *cobra.Command {
	return &cobra.Command{
		Use:    checkWorkerCommand,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := check.Worker(a.stdin, a.stdout); err != nil {
				return exitf(ExitUnavailable, "check worker: %s", message(err))
			}
			return nil
		},
	}
}

func (a *app) check(cfg check.Config, asJSON bool) error {
	raw, err := a.storeURL()
	if err != nil {
		return err
	}
	cfg.URL = raw
	if cfg.Resource != "" {
		if err := checkStoreURL(cfg.Resource, "--resource"); err != nil {
			return err
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return exitf(ExitUnavailable, "cannot find the dlock binary to run workers: %v", err)
	}
	cfg.Worker = func() *exec.Cmd { return exec.Command(exe, checkWorkerCommand) }
	if f, ok := a.stderr.(*os.File); ok && check.IsTerminal(f) {
		cfg.Progress = f
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := check.Run(ctx, cfg)
	var ue *check.UsageError
	switch {
	case errors.As(err, &ue):
		return usagef("%s", ue.Error())
	case err != nil && ctx.Err() != nil:
		return exitf(ExitSignalBase+int(syscall.SIGINT), "interrupted")
	case err != nil:
		return exitf(ExitUnavailable, "%s", message(err))
	}
	if asJSON {
		err = rep.WriteJSON(a.stdout)
	} else {
		err = rep.WriteText(a.stdout)
	}
	switch {
	case err != nil:
		return exitf(ExitUnavailable, "writing the report: %v", err)
	case ctx.Err() != nil:
		return exitf(ExitSignalBase+int(syscall.SIGINT), "interrupted")
	case !rep.OK:
		return &exitError{code: ExitCheckFailed}
	}
	return nil
}
