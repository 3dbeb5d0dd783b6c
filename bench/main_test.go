package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestMain makes the test binary a worker of the cells with OS processes
// when the bench starts it as one (see startFleet).
func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		if err := runWorker(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestAllWorkloads runs every workload on every library of every store for a
// few milliseconds, so that the program keeps compiling and running. It
// needs redis-server (the program starts five), etcd, ZooKeeper, PostgreSQL and nats-server.
func TestAllWorkloads(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cfg := config{
		settings: settings{ttl: 10 * time.Second, retry: time.Millisecond, pool: 8},
		dur:      40 * time.Millisecond,
		warm:     10 * time.Millisecond,
		budget:   30 * time.Second,
		clients:  2,
		slices:   2,
		stores:   storeNames(),
		// Hot key across processes with few of them: 3 and 8 processes
		// with CS=0 and 1ms, waiter scaling over 2, 3 and 8.
		fleet:    3,
		waiters:  []int{2, 3},
		procPool: 2,
	}
	if testing.Short() {
		cfg.only = regexp.MustCompile(`^redis/.*/(baseline|spin)$|^(etcd|zk)/(uncontended/G=1|fifo)/|^pg/hotkey-(procs|os)/G=2/`)
	}
	rep, err := run(ctx, cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range cfg.stores {
		if p, ok := rep.ping(st); !ok || p.LockP50 <= 0 {
			t.Errorf("no %s round trips measured: %+v", st, p)
		}
	}
	want := 0
	for _, c := range cells(cfg) {
		for _, lib := range libraries {
			if c.runs(lib, cfg) {
				want++
			}
		}
	}
	if len(rep.Results) != want {
		t.Errorf("%d results, want %d", len(rep.Results), want)
	}
	for _, r := range rep.Results {
		checkResult(t, r)
	}

	var out bytes.Buffer
	rep.print(&out)
	heads := []string{"Round trip", "Targets for dlock"}
	if !testing.Short() {
		heads = append(heads, "Redis, uncontended", "Redis, hot key", "Redis, handoff", "etcd and ZooKeeper, hot key")
	}
	heads = append(heads, "etcd and ZooKeeper, uncontended", "etcd and ZooKeeper, handoff", "Hot key across processes", "redis  hotkey-os", "handoff-os  spin", "Redis, handoff-os legs")
	if !testing.Short() {
		heads = append(heads, "Waiter scaling")
	}
	for _, s := range heads {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, out.String())
		}
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Error(err)
	}
	if t.Failed() || testing.Verbose() {
		t.Log("\n" + out.String())
	}
}

// checkResult checks a result of TestAllWorkloads.
func checkResult(t *testing.T, r result) {
	t.Helper()
	if r.Errors > 0 || r.Ops == 0 || r.GaveUp > 0 {
		t.Errorf("%s: %d ops, %d gave up, %d errors (first: %s)", r.Cell, r.Ops, r.GaveUp, r.Errors, r.FirstErr)
	}
	if strings.HasPrefix(r.Workload, "handoff") && r.HandoffCallP50 <= 0 {
		t.Errorf("%s: no handoff latency", r.Cell)
	}
	// The legs of every handoff between processes on Redis: the
	// release found in the server's log (the waiter sends nothing when the
	// release hands it the lock).
	if r.Cell == "redis/handoff-os/G=2/"+r.Library && (r.Legs == nil || r.Legs.Handoffs == 0 || r.Legs.HolderCmds < 1) {
		t.Errorf("%s: legs %+v", r.Cell, r.Legs)
	}
	// A loop in each process: the handoffs are found across them.
	if r.Workload == "hotkey-os" && r.Handoffs == 0 {
		t.Errorf("%s: no handoffs measured", r.Cell)
	}
	if strings.HasPrefix(r.Workload, "hotkey-") && (r.Goroutines < 2 || r.Fairness <= 0 || r.Fairness > 1) {
		t.Errorf("%s: %d goroutines, fairness %v", r.Cell, r.Goroutines, r.Fairness)
	}
	if r.Workload == "fifo" {
		// Every library on these stores queues in order, and the
		// workload sequences the queueing: a count is a fault of the
		// lock or of the workload.
		if r.Handoffs == 0 {
			t.Errorf("%s: no handoffs measured", r.Cell)
		}
		if r.Unconfirmed == 0 && r.OutOfOrder > 0 {
			t.Errorf("%s: %d acquisitions out of order", r.Cell, r.OutOfOrder)
		}
	}
}

func TestJain(t *testing.T) {
	for _, c := range []struct {
		xs   []int
		want float64
	}{
		{[]int{5, 5, 5, 5}, 1},
		{[]int{8, 0, 0, 0}, 0.25},
		{[]int{1, 3}, 0.8},
		{[]int{0, 0}, 0},
	} {
		if got := jain(c.xs); got != c.want {
			t.Errorf("jain(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}

// TestProcTreeCPU reads this process's CPU time from /proc.
func TestProcTreeCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
	}
	if got := procTreeCPU(os.Getpid()); got <= 0 {
		t.Errorf("procTreeCPU(self) = %v, want > 0", got)
	}
	if got := procTreeCPU(0); got != 0 {
		t.Errorf("procTreeCPU(0) = %v, want 0", got)
	}
}

func TestRoundRatio(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		var ds []time.Duration
		for _, n := range ns {
			ds = append(ds, time.Duration(n)*time.Millisecond)
		}
		return ds
	}
	med, lo, hi := roundRatio(ms(2, 3, 0, 8), ms(2, 2, 5, 4))
	if med != 1.5 || lo != 1 || hi != 2 {
		t.Errorf("roundRatio = %v, %v, %v; want 1.5, 1, 2", med, lo, hi)
	}
	if med, _, _ := roundRatio(nil, ms(1)); med != 0 {
		t.Errorf("roundRatio without rounds = %v, want 0", med)
	}
}

func TestTable(t *testing.T) {
	tb := table{header: []string{"name", "n"}, left: 1}
	tb.add("a", "1")
	tb.add("bbb", "1000")
	var b bytes.Buffer
	tb.write(&b)
	want := "name     n\na        1\nbbb   1000\n\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
}

func TestFmtDur(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                         "0",
		12345 * time.Nanosecond:   "12µs",
		-3 * time.Microsecond:     "-3µs",
		1500 * time.Microsecond:   "1.50ms",
		123456 * time.Microsecond: "123.5ms",
		2 * time.Second:           "2.00s",
	} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestFifoQueue checks the bookkeeping of the FIFO workload: a ticket waits
// for the previous one's record on the store, and acquisitions out of ticket
// order are counted.
func TestFifoQueue(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	counts := make(chan int)
	q := newFifoQueue(ctx, func(context.Context) (int, error) { return <-counts, nil }, 5)

	t0, err := q.join()
	if err != nil {
		t.Fatal(err)
	}
	joined := make(chan ticket)
	go func() {
		t1, err := q.join()
		if err != nil {
			t.Error(err)
		}
		joined <- t1
	}()
	counts <- 5 // t0's record is not there yet: t1 must wait
	select {
	case <-joined:
		t.Fatal("a ticket was taken before the previous one's record showed")
	default:
	}
	counts <- 6 // t0's record shows: t1 joins
	t1 := <-joined
	counts <- 7 // t1's record shows
	q.wg.Wait()
	if t0.n != 0 || t1.n != 1 {
		t.Fatalf("tickets %d, %d; want 0, 1", t0.n, t1.n)
	}

	// From here on every record shows at once.
	go func() {
		for n := 7; ; n++ {
			select {
			case counts <- n:
			case <-ctx.Done():
				return
			}
		}
	}()
	q.acquired(t0, time.Now()) // in order; no release before: no handoff
	t2, _ := q.join()
	q.releasing()
	q.released()
	q.acquired(t2, time.Now()) // ahead of t1: out of order; a handoff
	q.releasing()
	q.released()
	t3, _ := q.join()          // after the release began
	q.acquired(t3, time.Now()) // ahead of t1: out of order; not a handoff
	q.acquired(t1, time.Now()) // in order; no release since the last acquisition
	q.wg.Wait()
	if q.outOfOrder != 2 || q.unconfirmed != 0 {
		t.Errorf("%d out of order, %d unconfirmed; want 2, 0", q.outOfOrder, q.unconfirmed)
	}
	if len(q.handoffs) != 1 {
		t.Errorf("handoffs %v, want one", q.handoffs)
	}
}

// TestRowsNameCells checks that every target reads cells a full run has,
// on the libraries that run them, and that -short runs exactly those.
func TestRowsNameCells(t *testing.T) {
	cfg := config{fleet: 64, waiters: []int{8, 64, 256}, clients: 4}
	have := map[string]bool{}
	for _, c := range cells(cfg) {
		for _, lib := range libraries {
			if c.runs(lib, cfg) {
				have[c.name(lib.name)] = true
			}
		}
	}
	need := neededCells(cfg)
	for n := range need {
		if !have[n] {
			t.Errorf("a target reads %s, which no run has", n)
		}
	}
	for _, n := range []string{"redis/handoff-os/G=2/spin", "redis/hotkey-os/G=64/CS=1ms/dlock", "pg/hotkey-os/G=8/CS=0s/dlock", "etcd/hotkey-os/G=256/CS=1ms/dlock"} {
		if !need[n] {
			t.Errorf("no target reads %s", n)
		}
	}
	cfg.need = need
	for _, c := range cells(cfg) {
		for _, lib := range libraries {
			if lib.store == c.store && c.runs(lib, cfg) != need[c.name(lib.name)] {
				t.Errorf("-short: %s runs %v", c.name(lib.name), c.runs(lib, cfg))
			}
		}
	}
}

// TestEvaluate checks a target's status: met, missed, n/a when its cells
// failed, left out when they did not run.
func TestEvaluate(t *testing.T) {
	status := func(rs ...result) map[string]string {
		rep := &report{Results: rs}
		rep.Config.Fleet = 64
		st := map[string]string{}
		for _, tg := range rep.evaluate() {
			st[tg.Name+" / "+tg.Reference] = tg.Status + " " + tg.Measured
		}
		return st
	}
	r := func(cell string, ops int, opsPerSec float64, errs int) result {
		return result{Cell: cell, Ops: ops, OpsPerSec: opsPerSec, Errors: errs, HandoffCallP50: time.Duration(opsPerSec)}
	}
	un := "redis uncontended pairs/s, G=64, distinct keys: dlock / baseline (raw SET NX PX)"
	ho := "redis handoff-os p50, release call -> next holder, separate Clients / spin (raw retrying at once)"
	for _, c := range []struct {
		rs   []result
		want map[string]string
	}{
		{[]result{r("redis/uncontended/G=64/dlock", 1, 1300, 0), r("redis/uncontended/G=64/baseline", 1, 1000, 0)}, map[string]string{un: "met 1.30x"}},
		{[]result{r("redis/uncontended/G=64/dlock", 1, 1200, 0), r("redis/uncontended/G=64/baseline", 1, 1000, 0)}, map[string]string{un: "missed 1.20x"}},
		{[]result{r("redis/uncontended/G=64/dlock", 1, 1200, 1), r("redis/uncontended/G=64/baseline", 1, 1000, 0)}, map[string]string{un: "n/a -"}},
		{[]result{r("redis/uncontended/G=64/dlock", 1, 1200, 0)}, map[string]string{}},
		{[]result{r("redis/handoff-os/G=2/dlock", 1, 100, 0), r("redis/handoff-os/G=2/spin", 1, 100, 0)}, map[string]string{ho: "met 1.00x"}},
		{[]result{r("redis/handoff-os/G=2/dlock", 1, 101, 0), r("redis/handoff-os/G=2/spin", 1, 100, 0)}, map[string]string{ho: "missed 1.01x"}},
	} {
		got := status(c.rs...)
		if len(got) != len(c.want) {
			t.Errorf("%v: targets %v, want %v", c.rs, got, c.want)
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%v: %q is %q, want %q", c.rs, k, got[k], v)
			}
		}
	}
}

// TestParseMonitor reads MONITOR lines of a client and of a script.
func TestParseMonitor(t *testing.T) {
	l, ok := parseMonitor(`+1700000000.012345 [0 127.0.0.1:5000] "EVALSHA" "abc" "1" "k"`)
	if !ok || l.at != time.Unix(1700000000, 12345000) || l.src != "127.0.0.1:5000" || l.cmd != "evalsha" {
		t.Errorf("client line: %+v, %v", l, ok)
	}
	l, ok = parseMonitor(`+1700000000.000001 [0 lua] "publish" "ch" ""`)
	if !ok || l.src != "lua" || l.cmd != "publish" {
		t.Errorf("script line: %+v, %v", l, ok)
	}
	if _, ok := parseMonitor("+OK"); ok {
		t.Error("+OK parsed as a command")
	}
}
