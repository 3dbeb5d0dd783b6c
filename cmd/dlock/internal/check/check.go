// Package check runs `dlock check`: a lost-update workload against a lock
// store, with the faults a client can cause, and a report of what held.
//
// Worker processes (re-executions of the dlock binary, see Worker) loop:
// acquire one key, read a counter, write it plus one (a deliberately
// non-atomic read-modify-write: two holders at once lose an update), write
// the lock's fencing token to a register that rejects a token lower than
// the highest it accepted, release. They report each step with a
// CLOCK_MONOTONIC timestamp, so that the parent can tell whether holds
// overlapped. Meanwhile the parent pauses the holder past its lease
// (SIGSTOP, SIGCONT), cuts a holder off from the store with a TCP proxy,
// delays a worker's traffic, and kills a holder (SIGKILL), and then judges
// the run against what the backend promises.
package check

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/etcddlock"
	"github.com/dlockhq/dlock/internal/redact"
	"github.com/dlockhq/dlock/internal/tcpproxy"
	"github.com/dlockhq/dlock/zkdlock"
)

// Faults the checker can inject, as named by Config.Faults.
const (
	// FaultLatency delays one worker's traffic to the store (through its
	// proxy) for a while.
	FaultLatency = "latency"
	// FaultPause stops the worker that holds the lock (SIGSTOP) for one
	// and a half leases, then continues it (SIGCONT). On etcd and
	// ZooKeeper the lease of a stopped process is its session.
	FaultPause = "pause"
	// FaultCut blackholes the holder's connections to the store (through
	// its proxy) for one and a half leases.
	FaultCut = "cut"
	// FaultKill kills the holder (SIGKILL) and times the takeover.
	FaultKill = "kill"
)

// AllFaults lists every fault, in the order a run injects them.
var AllFaults = []string{FaultLatency, FaultPause, FaultCut, FaultKill}

// The lock key and the guard key the check uses in the store.
const (
	lockKey  = "dlock-check"
	guardKey = "dlock-check-running"
)

// injectedLatency is the delay FaultLatency adds in each direction.
const injectedLatency = 50 * time.Millisecond

// Config describes a check.
type Config struct {
	// URL is the lock store.
	URL string
	// Resource, if not empty, is the URL of the store that keeps the
	// protected counter and register; by default the lock store does.
	Resource string
	// Workers is the number of worker processes (at least 2).
	Workers int
	// Duration is how long the workload runs; a run goes on until its
	// faults are over.
	Duration time.Duration
	// TTL is the lease of every lock.
	TTL time.Duration
	// LockDelay is the lock delay of every lock (dlock.WithLockDelay).
	LockDelay time.Duration
	// Hold is the time a worker spends in each hold between reading and
	// writing the counter: it widens the window in which a second holder
	// loses an update.
	Hold time.Duration
	// Faults are the faults to inject (see AllFaults).
	Faults []string
	// Keep leaves the counter and the register in the store.
	Keep bool
	// Worker returns the command of a worker process, which must call
	// Worker with its standard input and output.
	Worker func() *exec.Cmd
	// Started, if not nil, is called once every worker is ready and the
	// workload starts: a test injects the faults of the store itself from
	// there.
	Started func()
	// Progress, if not nil, receives a status line while the check runs
	// (a terminal: the line is redrawn).
	Progress io.Writer
}

// UsageError reports a bad Config: a flag's value, or a store the check
// cannot run on.
type UsageError struct{ msg string }

// Error returns the message, which names the flag.
func (e *UsageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &UsageError{fmt.Sprintf(format, args...)}
}

func (cfg *Config) validate() error {
	switch {
	case cfg.Workers < 2:
		return usagef("invalid --workers %d: must be at least 2 (one to take over from another)", cfg.Workers)
	case cfg.Duration <= 0:
		return usagef("invalid --duration %v: must be positive", cfg.Duration)
	case cfg.TTL <= 0:
		return usagef("invalid --ttl %v: must be positive", cfg.TTL)
	case cfg.LockDelay < 0:
		return usagef("invalid --lock-delay %v: must not be negative", cfg.LockDelay)
	case cfg.Hold < 0:
		return usagef("invalid --hold %v: must not be negative", cfg.Hold)
	}
	for _, f := range cfg.Faults {
		if !slices.Contains(AllFaults, f) {
			return usagef("unknown fault %q (known: %s)", f, strings.Join(AllFaults, ", "))
		}
	}
	for _, raw := range []string{cfg.URL, cfg.Resource} {
		if u, err := url.Parse(raw); err == nil && u.Scheme == "mem" {
			return usagef("%s: an in-process store cannot be shared by worker processes", redact.String(raw))
		}
	}
	return nil
}

// worker is one worker process, as the parent sees it.
type worker struct {
	id      int
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stderr  bytes.Buffer // guarded by run.mu through tailWriter
	proxies []*tcpproxy.Proxy
	done    chan struct{} // closed when the process has been waited for

	// guarded by run.mu
	events  []event
	holding int   // the hold in progress, 0 if none
	lastAcq int64 // when it last acquired the lock
	ready   bool
	killed  int64 // when it was killed, 0 if it was not
	exited  int64
	paused  bool
}

// run is one check in progress.
type run struct {
	cfg     Config
	workers []*worker

	stopOnce sync.Once

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every event that changes a worker's state
	acquired int
	last     *worker // the worker of the latest acquisition
	faults   []Fault
	skipped  []string
	current  string // the fault in progress, for the progress line
}

// Run runs a check and returns its report. Errors are a *UsageError for a
// bad configuration, or the store's error when it cannot be used.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := supported(); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c, err := dlock.Open(ctx, cfg.URL)
	if err != nil {
		if errors.Is(err, dlock.ErrInvalidArgument) {
			return nil, &UsageError{err.Error()}
		}
		return nil, err
	}
	defer c.Close()
	caps := c.Capabilities()
	switch {
	case cfg.TTL < caps.MinTTL || cfg.TTL > caps.MaxTTL:
		return nil, usagef("invalid --ttl %v: this store takes leases from %v to %v", cfg.TTL, caps.MinTTL, caps.MaxTTL)
	case cfg.LockDelay > 0 && !caps.LockDelay:
		return nil, usagef("invalid --lock-delay %v: this store's holds end with its client's session", cfg.LockDelay)
	case cfg.LockDelay > caps.MaxTTL-cfg.TTL-caps.TTLResolution:
		return nil, usagef("invalid --lock-delay %v: with the --ttl of %v it passes this store's longest lease, %v", cfg.LockDelay, cfg.TTL, caps.MaxTTL)
	}
	guard, err := c.TryLock(ctx, guardKey, dlock.WithTTL(max(cfg.TTL, 10*time.Second)))
	if errors.Is(err, dlock.ErrNotAcquired) {
		return nil, fmt.Errorf("another dlock check is running on this store (it holds %q)", guardKey)
	}
	if err != nil {
		return nil, err
	}
	defer guard.Release(context.Background())

	res, closeRes, err := openResourceAt(ctx, cfg.URL, cfg.Resource, c)
	if err != nil {
		return nil, err
	}
	defer closeRes()
	// Leave nothing behind, however the run ends: the holds of killed
	// workers, the resource.
	cleanup := sync.OnceValue(func() error { return cleanUp(c, res, cfg.Keep) })
	defer cleanup()
	if err := res.reset(ctx); err != nil {
		return nil, fmt.Errorf("cannot set up the protected resource: %w", err)
	}

	r := &run{cfg: cfg, changed: make(chan struct{})}
	defer r.stopWorkers() // before the cleanup
	start, end, err := r.workload(ctx)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	counter, register, err := res.state(sctx)
	if err != nil {
		return nil, fmt.Errorf("cannot read the protected resource: %w", err)
	}
	if err := cleanup(); err != nil {
		return nil, err
	}
	rep := r.analyse(start, end, counter, register, caps)
	rep.Store = redact.String(cfg.URL)
	if cfg.Resource != "" {
		rep.Resource = redact.String(cfg.Resource)
	}
	return rep, nil
}

// cleanUp removes the holds of killed workers and, unless keep, the
// resource.
func cleanUp(c *dlock.Client, res resource, keep bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.ForceRelease(ctx, lockKey); err != nil && !errors.Is(err, dlock.ErrUnsupported) {
		return fmt.Errorf("cannot remove the holds of killed workers: %w", err)
	}
	if !keep {
		if err := res.remove(ctx); err != nil {
			return fmt.Errorf("cannot remove the protected resource: %w", err)
		}
	}
	return nil
}

// workload starts the workers, runs the workload with its faults and stops
// the workers; it returns when the workload started and ended.
func (r *run) workload(ctx context.Context) (start, end int64, err error) {
	if err := r.startWorkers(); err != nil {
		return 0, 0, err
	}
	if err := r.waitReady(ctx); err != nil {
		return 0, 0, err
	}
	start = monoNow()
	if r.cfg.Started != nil {
		r.cfg.Started()
	}
	stopProgress := r.progress(start)
	r.injectFaults(ctx, start)
	stopProgress()
	r.stopWorkers()
	return start, monoNow(), nil
}

// proxied returns, for a store URL of host:port lists that a plain TCP
// proxy can stand between, the URL with each address replaced by a new
// proxy's, and the proxies. It returns "" for other stores (files,
// TLS, stores whose clients learn other addresses from the server).
func proxied(raw string) (string, []*tcpproxy.Proxy, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", nil, err
	}
	switch u.Scheme {
	case "redis", "redlock", "etcd", "zk", "memcached", "nats":
	case "postgres", "postgresql":
		if m := u.Query().Get("sslmode"); m == "verify-full" || m == "verify-ca" {
			return "", nil, nil
		}
	case "mysql":
		if t := u.Query().Get("tls"); t != "" && t != "false" {
			return "", nil, nil
		}
	default:
		return "", nil, nil
	}
	var addrs []string
	var proxies []*tcpproxy.Proxy
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			continue
		}
		if !strings.Contains(h, ":") || strings.HasSuffix(h, "]") {
			return "", nil, nil // a default port: leave the URL alone
		}
		p, err := tcpproxy.Start(h)
		if err != nil {
			closeProxies(proxies)
			return "", nil, err
		}
		proxies = append(proxies, p)
		addrs = append(addrs, p.Addr())
	}
	if len(proxies) == 0 {
		return "", nil, nil
	}
	u.Host = strings.Join(addrs, ",")
	if u.Scheme == "nats" { // a NATS client connects to the servers a cluster advertises too
		q := u.Query()
		q.Set("discovery", "false")
		u.RawQuery = q.Encode()
	}
	return u.String(), proxies, nil
}

func closeProxies(ps []*tcpproxy.Proxy) {
	for _, p := range ps {
		p.Close()
	}
}

func (r *run) startWorkers() error {
	for i := range r.cfg.Workers {
		w := &worker{id: i + 1, done: make(chan struct{})}
		r.workers = append(r.workers, w)
		var wurl string
		if r.wants(FaultCut) || r.wants(FaultLatency) {
			var err error
			if wurl, w.proxies, err = proxied(r.cfg.URL); err != nil {
				return fmt.Errorf("cannot start a proxy: %w", err)
			}
		}
		if wurl == "" {
			wurl = r.cfg.URL
		}
		w.cmd = r.cfg.Worker()
		workerAttr(w.cmd)
		w.cmd.Stderr = tailWriter{&r.mu, &w.stderr}
		var err error
		if w.stdin, err = w.cmd.StdinPipe(); err != nil {
			return err
		}
		out, err := w.cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := w.cmd.Start(); err != nil {
			return fmt.Errorf("cannot start a worker: %w", err)
		}
		go r.read(w, out)
		line, _ := json.Marshal(workerConfig{ID: w.id, URL: wurl, Resource: r.cfg.Resource, Key: lockKey, TTL: r.cfg.TTL, LockDelay: r.cfg.LockDelay, Hold: r.cfg.Hold})
		if _, err := w.stdin.Write(append(line, '\n')); err != nil {
			return fmt.Errorf("cannot configure a worker: %w", err)
		}
	}
	return nil
}

// tailWriter keeps what a worker writes on stderr, for error messages.
type tailWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

// Write keeps the first 64KiB written.
func (t tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.b.Len() < 64<<10 {
		t.b.Write(p)
	}
	return len(p), nil
}

// read collects a worker's events until its output ends, then waits for
// the process.
func (r *run) read(w *worker, out io.Reader) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		r.mu.Lock()
		w.events = append(w.events, e)
		switch e.Kind {
		case evReady:
			w.ready = true
		case evAcquired:
			w.holding, w.lastAcq = e.Hold, e.At
			r.acquired++
			r.last = w
		case evReleased:
			if w.holding == e.Hold {
				w.holding = 0
			}
		}
		r.notify()
		r.mu.Unlock()
	}
	_ = w.cmd.Wait()
	r.mu.Lock()
	w.exited = monoNow()
	w.holding = 0
	r.notify()
	r.mu.Unlock()
	close(w.done)
}

// notify wakes the waiters of waitFor; r.mu is held.
func (r *run) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// waitFor waits until cond (called with r.mu held) is true, ctx ends or
// timeout passes, and reports whether cond became true.
func (r *run) waitFor(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		r.mu.Lock()
		ok, ch := cond(), r.changed
		r.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// readyTimeout bounds the start of the workers (connecting to the store).
const readyTimeout = 60 * time.Second

func (r *run) waitReady(ctx context.Context) error {
	var failed *worker
	ok := r.waitFor(ctx, readyTimeout, func() bool {
		all := true
		for _, w := range r.workers {
			if w.exited != 0 && !w.ready {
				failed = w
				return true
			}
			all = all && w.ready
		}
		return all
	})
	switch {
	case failed != nil:
		r.mu.Lock()
		msg := strings.TrimSpace(failed.stderr.String())
		r.mu.Unlock()
		return fmt.Errorf("worker %d could not start: %s", failed.id, msg)
	case ctx.Err() != nil:
		return ctx.Err()
	case !ok:
		return fmt.Errorf("the workers did not connect to the store within %v", readyTimeout)
	}
	return nil
}

// stopWorkers ends the workers: it undoes the faults, closes their input,
// waits for them to release their locks and exit, and kills those that do
// not. It is idempotent.
func (r *run) stopWorkers() { r.stopOnce.Do(r.stop) }

func (r *run) stop() {
	for _, w := range r.workers {
		for _, p := range w.proxies {
			p.SetDelay(0)
			p.Unblock()
		}
	}
	for _, w := range r.workers {
		if w.cmd == nil || w.cmd.Process == nil {
			close(w.done)
			continue
		}
		_ = w.cmd.Process.Signal(sigCont)
		w.stdin.Close()
	}
	timer := time.NewTimer(r.cfg.TTL + dlock.ReleaseTimeout + 5*time.Second)
	defer timer.Stop()
	late := false
	for _, w := range r.workers {
		if !late {
			select {
			case <-w.done:
				continue
			case <-timer.C:
				late = true
			}
		}
		select {
		case <-w.done:
		default:
			_ = w.cmd.Process.Kill()
			<-w.done
		}
	}
	for _, w := range r.workers {
		closeProxies(w.proxies)
	}
}

// holder waits for the next acquisition and returns the worker that made
// it, with its hold, so that a fault strikes early in a hold.
func (r *run) holder(ctx context.Context) (*worker, int) {
	var got *worker
	var hold int
	r.mu.Lock()
	n := r.acquired
	r.mu.Unlock()
	r.waitFor(ctx, 5*(r.cfg.TTL+r.cfg.LockDelay), func() bool {
		if w := r.last; r.acquired > n && w.holding != 0 && w.killed == 0 && !w.paused && w.exited == 0 {
			got, hold = w, w.holding
			return true
		}
		return false
	})
	return got, hold
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// wants reports whether the run injects fault f.
func (r *run) wants(f string) bool { return slices.Contains(r.cfg.Faults, f) }

// locked calls f with r.mu held.
func (r *run) locked(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

// storeLease returns how long the store keeps the lock of a holder that
// stopped or was cut off: the TTL, or on etcd and ZooKeeper the client's
// session (the URL's session=, 15s by default) if longer.
func storeLease(raw string, ttl time.Duration) time.Duration {
	u, err := url.Parse(raw)
	if err != nil {
		return ttl
	}
	var session time.Duration
	switch u.Scheme {
	case "etcd":
		session = etcddlock.DefaultSessionTTL
	case "zk":
		session = zkdlock.DefaultSessionTTL
	default:
		return ttl
	}
	if d, err := time.ParseDuration(u.Query().Get("session")); err == nil && d > 0 {
		session = d
	}
	return max(ttl, session)
}

// injectFaults runs the workload for the configured duration, injecting the
// faults one after another, and returns when both are over.
func (r *run) injectFaults(ctx context.Context, start int64) {
	at := func(frac float64) {
		sleep(ctx, time.Duration(float64(r.cfg.Duration)*frac)-time.Duration(monoNow()-start))
	}
	proxiedRun := r.proxiedRun()
	var bg sync.WaitGroup
	defer bg.Wait()
	if r.wants(FaultLatency) && proxiedRun {
		at(0.05)
		r.delay(ctx, &bg)
	}
	if r.wants(FaultPause) && ctx.Err() == nil {
		at(0.15)
		r.strike(ctx, FaultPause, "pausing worker %d", r.pause)
	}
	if r.wants(FaultCut) && proxiedRun && ctx.Err() == nil {
		r.strike(ctx, FaultCut, "cutting worker %d off", r.cut)
	}
	if r.wants(FaultKill) && ctx.Err() == nil {
		at(0.5)
		r.strike(ctx, FaultKill, "killed worker %d; waiting for a takeover", r.kill)
	}
	at(1)
}

// proxiedRun reports whether the workers reach the store through proxies;
// if not, it records the faults that need them as skipped.
func (r *run) proxiedRun() bool {
	if len(r.workers[0].proxies) > 0 {
		return true
	}
	names := slices.DeleteFunc([]string{FaultLatency, FaultCut}, func(f string) bool { return !r.wants(f) })
	if len(names) > 0 {
		r.locked(func() {
			r.skipped = append(r.skipped, strings.Join(names, ", ")+": the store is not named by host:port addresses that a TCP proxy can stand for (a file, TLS, Sentinel or Cluster)")
		})
	}
	return false
}

// delay slows the last worker's traffic for a while, in the background
// (bg), from now.
func (r *run) delay(ctx context.Context, bg *sync.WaitGroup) {
	w := r.workers[len(r.workers)-1]
	f := Fault{Kind: FaultLatency, Worker: w.id, Start: monoNow()}
	for _, p := range w.proxies {
		p.SetDelay(injectedLatency)
	}
	bg.Go(func() {
		sleep(ctx, min(r.cfg.Duration/4, 4*r.cfg.TTL))
		for _, p := range w.proxies {
			p.SetDelay(0)
		}
		f.End = monoNow()
		r.locked(func() { r.faults = append(r.faults, f) })
	})
}

// strike injects a fault of kind on the next holder of the lock, if there
// is one, and shows it (doing, of the worker's number) on the progress
// line. inject returns when the fault is over, false if it could not be
// injected.
func (r *run) strike(ctx context.Context, kind, doing string, inject func(context.Context, *worker, int64) bool) {
	w, hold := r.holder(ctx)
	if w == nil {
		return
	}
	r.locked(func() { r.current = fmt.Sprintf(doing, w.id) })
	defer r.locked(func() { r.current = "" })
	f := Fault{Kind: kind, Worker: w.id, Hold: hold, Start: monoNow()}
	if inject(ctx, w, f.Start) {
		f.End = monoNow()
		r.locked(func() { r.faults = append(r.faults, f) })
	}
}

// outlast returns how long a pause or a cut lasts: past the lease as the
// store sees it, without the lock delay (which is meant to outlast it).
func (r *run) outlast() time.Duration { return storeLease(r.cfg.URL, r.cfg.TTL) * 3 / 2 }

// pause stops w's process past its lease.
func (r *run) pause(ctx context.Context, w *worker, _ int64) bool {
	if w.cmd.Process.Signal(sigStop) != nil {
		return false
	}
	r.locked(func() { w.paused = true })
	sleep(ctx, r.outlast())
	_ = w.cmd.Process.Signal(sigCont)
	r.locked(func() { w.paused = false })
	return true
}

// cut blackholes w's traffic past its lease.
func (r *run) cut(ctx context.Context, w *worker, _ int64) bool {
	for _, p := range w.proxies {
		p.Block()
	}
	sleep(ctx, r.outlast())
	for _, p := range w.proxies {
		p.Unblock()
	}
	return true
}

// kill kills w's process at start and waits for the takeover: another
// worker's acquisition. A session-based store frees the hold when the
// session ends, which may be well after the TTL.
func (r *run) kill(ctx context.Context, w *worker, start int64) bool {
	if w.cmd.Process.Kill() != nil {
		return false
	}
	r.locked(func() { w.killed = start })
	r.waitFor(ctx, max(3*(r.cfg.TTL+r.cfg.LockDelay), 30*time.Second), func() bool {
		return slices.ContainsFunc(r.workers, func(o *worker) bool { return o != w && o.lastAcq > start })
	})
	return true
}

// progress draws a status line on the Progress writer every half second
// until the returned function is called, which clears it.
func (r *run) progress(start int64) (stop func()) {
	if r.cfg.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(r.cfg.Progress, "\r\033[K")
				return
			case <-t.C:
			}
			r.mu.Lock()
			n, cur := r.acquired, r.current
			r.mu.Unlock()
			line := fmt.Sprintf("dlock check: %4.1fs, %d acquisitions", time.Duration(monoNow()-start).Seconds(), n)
			if cur != "" {
				line += ", " + cur
			}
			fmt.Fprint(r.cfg.Progress, "\r\033[K"+line)
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// IsTerminal reports whether f is a terminal, for the progress line.
func IsTerminal(f *os.File) bool { return isTerminal(f) }
