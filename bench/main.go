// Command bench compares dlock with other lock libraries on the same
// workloads, in one run, against servers it starts itself on free loopback
// ports:
//
//   - Redis: dlock over redisdlock (and quorum over several servers) with
//     go-redsync/redsync, bsm/redislock and a hand-written SET NX PX + Lua
//     compare-and-delete baseline, also retrying at once (a busy spin);
//   - etcd: dlock over etcddlock with the etcd client's own
//     concurrency.Mutex;
//   - ZooKeeper: dlock over zkdlock with go-zookeeper's zk.Lock;
//   - PostgreSQL: dlock over sqldlock (hot key across processes only).
//
// Run it with
//
//	cd bench && go run .
//
// See README.md for the flags and what every column means.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

type config struct {
	settings
	dur      time.Duration // per cell
	warm     time.Duration // warm-up per cell, on other keys
	budget   time.Duration // wait budget of one Lock call
	clients  int           // clients (connection pools) per library in the multi-goroutine workloads
	slices   int           // each cell runs in this many rounds, the libraries taking turns
	only     *regexp.Regexp
	need     map[string]bool // if set, only these cells run (-short: the cells the targets read)
	stores   []string        // stores to run cells on: redis, etcd, zk, pg
	fleet    int             // processes (a Client each) of the main hot-key-across-processes cells
	waiters  []int           // processes of the waiter-scaling cells (hot key across processes, CS=1ms)
	procPool int             // go-redis PoolSize of every client in the across-processes cells
	redis    []string        // existing redis-servers; nil: start our own
	etcd     string          // existing etcd; "": start our own
	zk       string          // existing ZooKeeper; "": start our own
	nats     string          // existing nats-server with JetStream; "": start our own
	delay    time.Duration   // one-way latency added by a proxy in front of every server
}

// quorumG is the number of goroutines of the concurrent quorum cells.
const quorumG = 16

func main() {
	if os.Getenv(workerEnv) != "" {
		if err := runWorker(os.Stdin, os.Stdout); err != nil {
			fatalf("worker: %v", err)
		}
		return
	}
	var (
		cfg      config
		only     = flag.String("only", "", "run only the cells whose name (store/workload/params/library, e.g. redis/hotkey/G=64/CS=1ms/dlock) matches this regexp")
		stores   = flag.String("stores", strings.Join(storeNames(), ","), "comma-separated stores to run the cells of")
		redisArg = flag.String("redis", "", "comma-separated host:port of existing redis-servers to use instead of starting 5 (quorum cells need 3 and 5)")
		jsonOut  = flag.String("json", "", "also write the results as JSON to this file (- for stdout, instead of the tables)")
		cpuProf  = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
		waiters  = flag.String("waiters", "8,64,256", "comma-separated process counts of the waiter-scaling cells (hot key, CS=1ms, a Client per goroutine)")
		short    = flag.Bool("short", false, "a smoke test of the targets: only the cells the targets read, in one slice of 1s after 100ms warm-up, waiter scaling over 8 and 64 processes (flags given explicitly win)")
	)
	flag.StringVar(&cfg.etcd, "etcd", "", "host:port of an existing etcd (client port) to use instead of starting one; nothing else may write to it meanwhile")
	flag.StringVar(&cfg.zk, "zk", "", "host:port of an existing ZooKeeper to use instead of starting one (the FIFO check needs its mntr command); nothing else may write to it meanwhile")
	flag.StringVar(&cfg.nats, "nats", "", "host:port of an existing nats-server with JetStream to use instead of starting one; the bench uses its bucket \"dlock\"")
	flag.DurationVar(&cfg.dur, "duration", 3*time.Second, "how long each cell runs, per library")
	flag.DurationVar(&cfg.warm, "warmup", 300*time.Millisecond, "warm-up before each cell (same workload, other keys)")
	flag.DurationVar(&cfg.budget, "budget", 30*time.Second, "wait budget of one Lock call; running out counts as giving up")
	flag.DurationVar(&cfg.ttl, "ttl", 10*time.Second, "lease (TTL) of every lock, for every library")
	flag.DurationVar(&cfg.retry, "retry", 2*time.Millisecond, "fixed delay between attempts for the libraries that poll (redsync, redislock, baseline)")
	flag.DurationVar(&cfg.delay, "delay", 0, "put a proxy in front of every server that delays each direction by this much (round trip 2x), to emulate a network")
	flag.IntVar(&cfg.pool, "pool", 32, "go-redis PoolSize of every client, for every library")
	flag.IntVar(&cfg.slices, "slices", 3, "run each cell in this many rounds, the libraries taking turns (so that they share the machine's ups and downs)")
	flag.IntVar(&cfg.fleet, "fleet", 64, "processes (a Client each) of the hot-key-across-processes cells with CS=0 and CS=1ms")
	flag.IntVar(&cfg.procPool, "procpool", 2, "go-redis PoolSize of every client in the across-processes cells (a Client per goroutine)")
	flag.IntVar(&cfg.clients, "clients", 4, "clients (separate connection pools or sessions, as separate processes would have) per library")
	flag.Parse()
	if flag.NArg() > 0 {
		fatalf("unexpected arguments: %q", flag.Args())
	}
	if *short {
		shortDefaults()
	}
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			fatalf("-only: %v", err)
		}
		cfg.only = re
	}
	for _, s := range strings.Split(*stores, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !slices.Contains(storeNames(), s) {
			fatalf("-stores: unknown store %q (known: %s)", s, strings.Join(storeNames(), ", "))
		}
		cfg.stores = append(cfg.stores, s)
	}
	for _, w := range strings.Split(*waiters, ",") {
		if w = strings.TrimSpace(w); w == "" {
			continue
		}
		n, err := strconv.Atoi(w)
		if err != nil || n < 2 {
			fatalf("-waiters: %q is not a process count of at least 2", w)
		}
		cfg.waiters = append(cfg.waiters, n)
	}
	if *short {
		cfg.need = neededCells(cfg)
	}
	if *redisArg != "" {
		cfg.redis = strings.Split(*redisArg, ",")
	}
	if cfg.dur <= 0 || cfg.budget <= 0 || cfg.ttl <= 0 || cfg.retry <= 0 || cfg.pool <= 0 || cfg.clients <= 0 || cfg.slices <= 0 || cfg.fleet < 2 || cfg.procPool <= 0 || cfg.warm < 0 || cfg.delay < 0 {
		fatalf("-duration, -budget, -ttl, -retry, -pool, -procpool, -clients and -slices must be positive, -fleet at least 2, -warmup and -delay not negative")
	}

	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			fatalf("%v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatalf("%v", err)
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, cfg, os.Stderr)
	if err != nil {
		fatalf("%v", err)
	}
	if *jsonOut != "-" {
		rep.print(os.Stdout)
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		b = append(b, '\n')
		if *jsonOut == "-" {
			os.Stdout.Write(b)
		} else if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			fatalf("%v", err)
		}
	}
	if ctx.Err() != nil {
		pprof.StopCPUProfile()
		os.Exit(130)
	}
}

// shortDefaults sets the flags -short changes, unless they were given.
func shortDefaults() {
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, v := range map[string]string{"duration": "1s", "slices": "1", "warmup": "100ms", "waiters": "8,64"} {
		if !set[name] {
			flag.Set(name, v)
		}
	}
}

// redisLog is go-redis's logger: its default, which can be silenced.
var redisLog = func() *quietLogger {
	l := &quietLogger{l: log.New(os.Stderr, "redis: ", log.LstdFlags)}
	redis.SetLogger(l)
	return l
}()

type quietLogger struct {
	l     *log.Logger
	quiet atomic.Bool
}

func (q *quietLogger) Printf(_ context.Context, format string, v ...any) {
	if !q.quiet.Load() {
		q.l.Printf(format, v...)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	os.Exit(2)
}

// cell is one workload with one set of parameters on one store; it runs once
// per library of that store.
type cell struct {
	store    string // redis, etcd, zk
	workload string
	params   string
	cs       time.Duration // critical section (hot key)
	servers  int           // independent servers the lock spans
	clients  int           // lockers (clients) the workload spreads over
	quorum   bool          // only for libraries that lock over several servers
	procs    bool          // a Client per goroutine, as separate processes would have (clients == goroutines)
	os       bool          // each Client in an OS process of its own (a worker: see procs.go)
	run      func(rc *runCtx, s *samples)
}

// procCells returns the hot-key-across-processes cells of a store: every
// goroutine has a Client of its own (its own connection pool, session or
// subscription), as separate processes would. They are the counterparts of
// the shared-Client hot key cells (G=8) and the fleet's cells (cfg.fleet
// processes), both with CS=0 and CS=1ms, and the waiter-scaling cells
// (cfg.waiters processes, CS=1ms), in the order of G.
func procCells(cfg config, store string) []cell {
	both := []int{8, cfg.fleet}
	gs := append(slices.Clone(both), cfg.waiters...)
	slices.Sort(gs)
	var cs []cell
	for _, g := range slices.Compact(gs) {
		for _, d := range []time.Duration{0, time.Millisecond} {
			if d == 0 && !slices.Contains(both, g) {
				continue
			}
			cs = append(cs, cell{store: store, workload: "hotkey-procs", params: fmt.Sprintf("G=%d/CS=%v", g, d), cs: d, servers: 1, clients: g, procs: true,
				run: func(rc *runCtx, s *samples) { hotKey(rc, s, g, d) }},
				cell{store: store, workload: "hotkey-os", params: fmt.Sprintf("G=%d/CS=%v", g, d), cs: d, servers: 1, clients: g, procs: true, os: true,
					run: func(rc *runCtx, s *samples) { hotKeyOS(rc, s, g, d) }})
		}
	}
	return cs
}

// handoffCells returns the handoff cells of a store: two Clients in this
// process, and two OS processes.
func handoffCells(store string) []cell {
	return []cell{
		{store: store, workload: "handoff", params: "G=2", servers: 1, clients: 2, run: handoff},
		{store: store, workload: "handoff-os", params: "G=2", servers: 1, clients: 2, procs: true, os: true, run: handoff},
	}
}

func cells(cfg config) []cell {
	var cs []cell
	// Redis.
	for _, g := range []int{1, 16, 64} {
		cs = append(cs, cell{store: "redis", workload: "uncontended", params: fmt.Sprintf("G=%d", g), servers: 1, clients: min(g, cfg.clients),
			run: func(rc *runCtx, s *samples) { uncontended(rc, s, g) }})
	}
	for _, g := range []int{8, 64} {
		for _, d := range []time.Duration{0, time.Millisecond} {
			cs = append(cs, cell{store: "redis", workload: "hotkey", params: fmt.Sprintf("G=%d/CS=%v", g, d), cs: d, servers: 1, clients: min(g, cfg.clients),
				run: func(rc *runCtx, s *samples) { hotKey(rc, s, g, d) }})
		}
	}
	cs = append(cs, procCells(cfg, "redis")...)
	// Two goroutines with a Client each: a handoff between processes.
	cs = append(cs, handoffCells("redis")...)
	for _, n := range []int{3, 5} {
		cs = append(cs, cell{store: "redis", workload: "quorum", params: fmt.Sprintf("N=%d", n), servers: n, clients: 1, quorum: true,
			run: func(rc *runCtx, s *samples) { uncontended(rc, s, 1) }})
	}
	// The same with quorumG goroutines on keys of their own, through one
	// client (one Redsync, one dlock Client).
	for _, n := range []int{3, 5} {
		cs = append(cs, cell{store: "redis", workload: "quorum-concurrent", params: fmt.Sprintf("N=%d/G=%d", n, quorumG), servers: n, clients: 1, quorum: true,
			run: func(rc *runCtx, s *samples) { uncontended(rc, s, quorumG) }})
	}
	// The consensus stores: the same cells on each.
	for _, st := range []string{"etcd", "zk"} {
		for _, g := range []int{1, 16} {
			cs = append(cs, cell{store: st, workload: "uncontended", params: fmt.Sprintf("G=%d", g), servers: 1, clients: min(g, cfg.clients),
				run: func(rc *runCtx, s *samples) { uncontended(rc, s, g) }})
		}
		cs = append(cs, cell{store: st, workload: "hotkey", params: "G=8/CS=0s", servers: 1, clients: min(8, cfg.clients),
			run: func(rc *runCtx, s *samples) { hotKey(rc, s, 8, 0) }})
		// A client per goroutine: every waiter queues on the store, where
		// the order is kept (goroutines of one client queue locally first).
		cs = append(cs, cell{store: st, workload: "fifo", params: "G=8/CS=1ms", cs: time.Millisecond, servers: 1, clients: 8,
			run: func(rc *runCtx, s *samples) { fifoHandoff(rc, s, 8, time.Millisecond) }})
		// A waiter that has just begun to wait, as on Redis.
		cs = append(cs, handoffCells(st)...)
		cs = append(cs, procCells(cfg, st)...)
	}
	// NATS JetStream key-value, next to etcd. No fifo cell: the queue lives
	// in one record per key, where the cell cannot count the waiters.
	for _, g := range []int{1, 16} {
		cs = append(cs, cell{store: "nats", workload: "uncontended", params: fmt.Sprintf("G=%d", g), servers: 1, clients: min(g, cfg.clients),
			run: func(rc *runCtx, s *samples) { uncontended(rc, s, g) }})
	}
	cs = append(cs, cell{store: "nats", workload: "hotkey", params: "G=8/CS=0s", servers: 1, clients: min(8, cfg.clients),
		run: func(rc *runCtx, s *samples) { hotKey(rc, s, 8, 0) }})
	cs = append(cs, handoffCells("nats")...)
	cs = append(cs, procCells(cfg, "nats")...)
	// PostgreSQL: only the hot key across processes.
	cs = append(cs, procCells(cfg, "pg")...)
	return cs
}

func (c cell) name(lib string) string {
	return c.store + "/" + c.workload + "/" + c.params + "/" + lib
}

// contended reports whether the cell's clients contend for one key.
func (c cell) contended() bool {
	return strings.HasPrefix(c.workload, "hotkey") || strings.HasPrefix(c.workload, "handoff") || c.workload == "fifo"
}

// runs reports whether the cell runs on lib, given the -only filter and
// -short's selection.
func (c cell) runs(lib library, cfg config) bool {
	if lib.store != c.store || c.quorum && !lib.quorum || !c.quorum && lib.quorumOnly || lib.contended && !c.contended() {
		return false
	}
	n := c.name(lib.name)
	return (cfg.only == nil || cfg.only.MatchString(n)) && (cfg.need == nil || cfg.need[n])
}

// neededCells returns the names of the cells the targets read.
func neededCells(cfg config) map[string]bool {
	rep := &report{}
	rep.Config.Fleet, rep.Config.Waiters = cfg.fleet, cfg.waiters
	need := map[string]bool{}
	for _, r := range rep.rows() {
		for _, c := range r.cells {
			need[c] = true
		}
	}
	return need
}

// report is everything one run measured.
type report struct {
	Started time.Time `json:"started"`
	Config  struct {
		Duration, Warmup, Budget, TTL, Retry, Delay time.Duration
		Pool, Clients, Slices                       int
		Fleet, ProcPool                             int                 // processes of the fleet cells; PoolSize in the across-processes cells
		Waiters                                     []int               // processes of the waiter-scaling cells
		Servers                                     map[string][]string // by store
	} `json:"config"`
	// Round trip of each store that ran: back-to-back no-op requests on one
	// connection (Cell "<store>/ping").
	Pings []result `json:"pings"`
	// The machine's load average (Linux), before and after the cells: other
	// work on the machine skews every number.
	LoadBefore string   `json:"load_before,omitempty"`
	LoadAfter  string   `json:"load_after,omitempty"`
	Results    []result `json:"results"`
	Skipped    []string `json:"skipped,omitempty"` // cells the servers could not take
	Targets    []target `json:"targets"`
}

// ping returns the round trip of the store, if it ran.
func (rep *report) ping(store string) (result, bool) {
	for _, p := range rep.Pings {
		if p.Store == store {
			return p, p.Ops > 0
		}
	}
	return result{}, false
}

// run runs every selected cell on every library, store by store: it starts
// (or connects to) the store's servers, runs the store's cells cell by cell
// (all libraries run one cell before the next cell starts, so slow drifts of
// the machine hit them alike), and stops the servers before the next store.
// Progress goes to progress.
func run(ctx context.Context, cfg config, progress io.Writer) (*report, error) {
	rep := &report{Started: time.Now()}
	rep.Config.Duration, rep.Config.Warmup, rep.Config.Budget = cfg.dur, cfg.warm, cfg.budget
	rep.Config.TTL, rep.Config.Retry, rep.Config.Pool, rep.Config.Clients, rep.Config.Slices = cfg.ttl, cfg.retry, cfg.pool, cfg.clients, cfg.slices
	rep.Config.Delay, rep.Config.Servers = cfg.delay, map[string][]string{}
	rep.Config.Fleet, rep.Config.ProcPool, rep.Config.Waiters = cfg.fleet, cfg.procPool, cfg.waiters

	rep.LoadBefore = loadAvg()
	defer func() { rep.LoadAfter = loadAvg() }()
	runID := rand.Text()[:8]
	all := cells(cfg)
	for _, st := range storeList {
		if !slices.Contains(cfg.stores, st.name) || ctx.Err() != nil {
			continue
		}
		// The cells to run, with their libraries.
		type planned struct {
			c    cell
			libs []library
		}
		var plan []planned
		for _, c := range all {
			var libs []library
			for _, lib := range libraries {
				if c.runs(lib, cfg) {
					libs = append(libs, lib)
				}
			}
			if c.store == st.name && len(libs) > 0 {
				plan = append(plan, planned{c, libs})
			}
		}
		if len(plan) == 0 {
			continue
		}
		if err := func() error {
			srv, err := st.start(ctx, cfg)
			if err != nil {
				return err
			}
			defer srv.stop()
			if cfg.delay > 0 {
				// The libraries dial the proxies; the bench's own records
				// count (see probe) keeps the direct addresses.
				proxied := make([]string, len(srv.addrs))
				for i, a := range srv.addrs {
					px, err := testsrv.StartDelayedProxy(a, cfg.delay)
					if err != nil {
						return err
					}
					defer px.Close()
					proxied[i] = px.Addr()
				}
				srv.addrs = proxied
			}
			rep.Config.Servers[st.name] = srv.addrs

			// The round trip: warm a connection, then measure.
			pr, err := st.probe(srv.addrs[:1], srv.direct[:1], srv.pidsOf(1), cfg.settings)
			if err != nil {
				return fmt.Errorf("%s: %w", st.name, err)
			}
			pingProbe(ctx, pr, min(cfg.warm, 100*time.Millisecond))
			p := pingProbe(ctx, pr, min(cfg.dur, time.Second))
			pr.close()
			p.Cell, p.Store, p.Workload, p.Library = st.name+"/ping", st.name, "ping", st.server
			rep.Pings = append(rep.Pings, p)
			fmt.Fprintf(progress, "%s round trip %s: p50 %v\n", st.name, srv.addrs[0], fmtDur(p.LockP50))

			for _, pl := range plan {
				if ctx.Err() != nil {
					break
				}
				if pl.c.servers > len(srv.addrs) {
					fmt.Fprintf(progress, "%s: skipped: needs %d servers, have %d\n", pl.c.name("*"), pl.c.servers, len(srv.addrs))
					continue
				}
				if srv.maxClients > 0 && pl.c.clients > srv.maxClients {
					fmt.Fprintf(progress, "%s: skipped: needs %d clients, the server's connection limit allows %d\n", pl.c.name("*"), pl.c.clients, srv.maxClients)
					rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: needs %d clients, the server's connection limit allows %d", pl.c.name("*"), pl.c.clients, srv.maxClients))
					continue
				}
				for _, r := range runCell(ctx, cfg, st, pl.c, pl.libs, srv.addrs[:pl.c.servers], srv.direct[:pl.c.servers], srv.pidsOf(pl.c.servers), runID) {
					fmt.Fprintf(progress, "%-40s %10.0f ops/s  lock p50 %-8s p99 %-8s errors %d\n", r.Cell, r.OpsPerSec, fmtDur(r.LockP50), fmtDur(r.LockP99), r.Errors)
					rep.Results = append(rep.Results, r)
				}
			}
			return nil
		}(); err != nil {
			return nil, err
		}
	}
	rep.Targets = rep.evaluate()
	return rep, nil
}

// runCell runs one cell on the given libraries. It opens fresh clients of
// every library and warms each up on the cell's workload with other keys.
// Then it measures in cfg.slices rounds: in each, every library in turn
// runs for duration/slices on keys of its own, so that the libraries share
// whatever else the machine is doing.
func runCell(ctx context.Context, cfg config, st storeKind, c cell, libs []library, addrs, direct []string, pids []int, runID string) []result {
	type entry struct {
		rc *runCtx
		s  samples
	}
	es := make([]*entry, len(libs))
	// The bench's own connection: round trips, server CPU, records.
	pr, err := st.probe(addrs, direct, pids, cfg.settings)
	if err != nil {
		for i := range es {
			es[i] = &entry{}
			es[i].s.err(fmt.Errorf("probe: %w", err))
		}
	} else {
		defer pr.close()
	}
	set := cfg.settings
	if c.procs {
		set.pool = cfg.procPool
	}
	fl, flErr := openFleet(c, libs, addrs, set, cfg.budget)
	defer fl.close()
	for i, lib := range libs {
		if pr == nil {
			break
		}
		es[i] = &entry{}
		lks, closeAll, err := lockersFor(fl, flErr, lib, addrs, set, c.clients)
		defer closeAll()
		if err != nil {
			es[i].s.err(fmt.Errorf("open: %w", err))
			continue
		}
		rc := &runCtx{ctx: ctx, lks: lks, budget: cfg.budget, ping: pr.ping, records: pr.records}
		es[i].rc = rc
		if cfg.warm > 0 {
			rc.prefix, rc.dur = fmt.Sprintf("bench:%s:warm:%s:", runID, c.name(lib.name)), cfg.warm
			c.run(rc, &samples{})
		}
		rc.prefix, rc.dur = fmt.Sprintf("bench:%s:%s:", runID, c.name(lib.name)), cfg.dur/time.Duration(cfg.slices)
	}
	// The legs of the handoffs across processes on Redis, from the
	// server's log.
	mon, err := startLegs(c, direct[0])
	if err != nil {
		es[0].s.err(err)
	}
	for range cfg.slices {
		for _, e := range es {
			if e.rc != nil && ctx.Err() == nil {
				measureRound(ctx, c, pr, e.rc, &e.s)
			}
		}
	}
	if err := mon.finish(ctx); err != nil {
		es[0].s.err(err)
	}
	rs := make([]result, len(libs))
	for i, e := range es {
		r := e.s.result()
		r.Legs = mon.legs(e.s.windows)
		r.Cell, r.Store, r.Workload, r.Library, r.Servers, r.CS = c.name(libs[i].name), c.store, c.workload, libs[i].name, c.servers, c.cs
		if r.Goroutines == 0 {
			r.Goroutines = c.clients
		}
		rs[i] = r
	}
	return rs
}

// measureRound runs one round (slice) of cell c on one library, with its
// client and server CPU time and, in this process, its allocations.
func measureRound(ctx context.Context, c cell, pr probe, rc *runCtx, s *samples) {
	cli, srv := processCPU(), pr.serverCPU(ctx)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	s.startRound()
	c.run(rc, s)
	s.endRound()
	runtime.ReadMemStats(&m1)
	if !c.os {
		s.mallocs, s.bytes = s.mallocs+m1.Mallocs-m0.Mallocs, s.bytes+m1.TotalAlloc-m0.TotalAlloc
	}
	s.clientCPU += processCPU() - cli
	s.serverCPU += pr.serverCPU(ctx) - srv
}

// openFleet starts the worker processes of a cell that runs in them (nil
// for the others), each with a client of every library of the cell.
func openFleet(c cell, libs []library, addrs []string, set settings, budget time.Duration) (*fleet, error) {
	if !c.os {
		return nil, nil
	}
	spec := workerSpec{Store: c.store, Addrs: addrs, TTL: set.ttl, Retry: set.retry, Pool: set.pool, Budget: budget}
	for _, lib := range libs {
		spec.Libs = append(spec.Libs, lib.name)
	}
	return startFleet(spec, c.clients)
}

// lockersFor returns the n clients of lib for a cell: the fleet's, if the
// cell runs in worker processes (fleetErr: they failed to start), else
// fresh ones in this process.
func lockersFor(fl *fleet, fleetErr error, lib library, addrs []string, set settings, n int) ([]locker, func(), error) {
	if fleetErr != nil {
		return nil, func() {}, fleetErr
	}
	if fl != nil {
		return fl.lockers(lib.name), func() {}, nil
	}
	return openLockers(lib, addrs, set, n)
}

// openLockers opens n clients of lib, a few at a time (opening a client of
// a consensus store or PostgreSQL takes a round trip or more), and returns
// them with the function that closes them all, also when it fails.
func openLockers(lib library, addrs []string, set settings, n int) ([]locker, func(), error) {
	lks := make([]locker, n)
	closers := make([]func(), n)
	errs := make([]error, n)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for j := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			set := set
			set.name = clientName(j)
			lks[j], closers[j], errs[j] = lib.open(addrs, set)
		})
	}
	wg.Wait()
	closeAll := func() {
		var wg sync.WaitGroup
		for _, f := range closers {
			if f != nil {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					f()
				})
			}
		}
		wg.Wait()
	}
	failed := 0
	var first error
	for _, err := range errs {
		if err != nil {
			if failed++; first == nil {
				first = err
			}
		}
	}
	if first != nil {
		return nil, closeAll, fmt.Errorf("%d of %d clients failed to open, the first: %w", failed, n, first)
	}
	return lks, closeAll, nil
}

// clientName names client i of a cell (its connections, on Redis), so that
// the server's log tells the clients apart.
func clientName(i int) string { return "bench-" + strconv.Itoa(i) }

// find returns the result of the named cell, if it ran without errors.
func (rep *report) find(name string) (result, bool) {
	for _, r := range rep.Results {
		if r.Cell == name {
			return r, r.Errors == 0 && r.Ops > 0
		}
	}
	return result{}, false
}

// native returns the result of the same cell on the store's native recipe
// (the library marked native), if it ran without errors.
func (rep *report) native(r result) (result, bool) {
	for _, lib := range libraries {
		if lib.store == r.Store && lib.native {
			if lib.name == r.Library {
				return result{}, false
			}
			return rep.find(strings.TrimSuffix(r.Cell, r.Library) + lib.name)
		}
	}
	return result{}, false
}

// roundRatio returns the median, the least and the greatest of a[i]/b[i]:
// the ratio of two libraries' medians round by round (the rounds of a cell
// interleave the libraries, so round i of both ran at about the same time).
// It returns zeros if there are no rounds to pair.
func roundRatio(a, b []time.Duration) (median, lo, hi float64) {
	var rs []float64
	for i := range min(len(a), len(b)) {
		if a[i] > 0 && b[i] > 0 {
			rs = append(rs, float64(a[i])/float64(b[i]))
		}
	}
	if len(rs) == 0 {
		return 0, 0, 0
	}
	slices.Sort(rs)
	median = rs[len(rs)/2]
	if len(rs)%2 == 0 {
		median = (rs[len(rs)/2-1] + rs[len(rs)/2]) / 2
	}
	return median, rs[0], rs[len(rs)-1]
}

// loadAvg returns the 1, 5 and 15 minute load averages, "" if unknown.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
