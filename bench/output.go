package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// print writes the report as aligned text tables, one per workload, with
// one row per library (and parameter set): its sections in order (one
// with nothing to show writes nothing).
func (rep *report) print(w io.Writer) {
	for _, section := range []func(io.Writer){
		rep.printHeader, rep.printUncontended, rep.printHotKey, rep.printHandoff, rep.printLegs, rep.printQuorum,
		rep.printQuorumConcurrent, rep.printConsensus, rep.printProcs, rep.printErrors, rep.printTargets,
	} {
		section(w)
	}
}

// byWorkload returns the results of the workloads on store, in the order
// they ran.
func (rep *report) byWorkload(store string, wls ...string) []result {
	var rs []result
	for _, r := range rep.Results {
		if r.Store == store && slices.Contains(wls, r.Workload) {
			rs = append(rs, r)
		}
	}
	return rs
}

// printHeader writes the settings, the servers and the round trips.
func (rep *report) printHeader(w io.Writer) {
	c := rep.Config
	fmt.Fprintf(w, "dlock comparison: %v per cell and library (in %d interleaved slices) after %v warm-up; TTL %v; polling libraries retry every %v; go-redis PoolSize %d; up to %d clients per library; wait budget %v\n",
		c.Duration, c.Slices, c.Warmup, c.TTL, c.Retry, c.Pool, c.Clients, c.Budget)
	fmt.Fprintf(w, "hot key across processes: a Client per goroutine (go-redis PoolSize %d), %d processes with CS=0 and 1ms, waiter scaling over %v processes with CS=1ms\n",
		c.ProcPool, c.Fleet, c.Waiters)
	for _, st := range storeList {
		if addrs := c.Servers[st.name]; len(addrs) > 0 {
			fmt.Fprintf(w, "%s servers: %s\n", st.name, strings.Join(addrs, " "))
		}
	}
	if c.Delay > 0 {
		fmt.Fprintf(w, "every server behind a proxy that delays each direction by at least %v (Go's timers may add up to a millisecond more: the round trip lines show the real round trip)\n", c.Delay)
	}
	fmt.Fprintln(w)
	pingWhat := map[string]string{"redis": "PINGs", "etcd": "GETs of a missing key", "zk": "exists(\"/\")", "nats": "PINGs (flushes)", "pg": "pings (empty statements)"}
	for _, p := range rep.Pings {
		fmt.Fprintf(w, "Round trip %-5s (back-to-back %s on one connection, %d samples): p50 %v  p99 %v\n",
			p.Store, pingWhat[p.Store], p.Ops, fmtDur(p.LockP50), fmtDur(p.LockP99))
	}
	if rep.LoadBefore != "" {
		fmt.Fprintf(w, "load average (1/5/15 min) before: %s, after: %s\n", rep.LoadBefore, rep.LoadAfter)
	}
	fmt.Fprintln(w)
}

func (rep *report) printUncontended(w io.Writer) {
	if rs := rep.byWorkload("redis", "uncontended"); len(rs) > 0 {
		fmt.Fprintln(w, "Redis, uncontended: lock/unlock pairs, each goroutine on its own key")
		t := table{header: []string{"G", "library", "pairs/s", "x baseline", "lock p50", "lock p99", "pair p50", "client CPU/op", "server CPU/op", "allocs/op", "B/op", "errors"}, left: 2}
		for _, r := range rs {
			ratio := "-"
			if b, ok := rep.find(strings.TrimSuffix(r.Cell, r.Library) + "baseline"); ok && b.OpsPerSec > 0 {
				ratio = fmt.Sprintf("%.2f", r.OpsPerSec/b.OpsPerSec)
			}
			t.add(strconv.Itoa(r.Goroutines), r.Library, fmtRate(r.OpsPerSec), ratio,
				fmtDur(r.LockP50), fmtDur(r.LockP99), fmtDur(r.PairP50),
				fmtDur(r.ClientCPUPerOp), fmtDur(r.ServerCPUPerOp), fmt.Sprintf("%.1f", r.AllocsPerOp), fmt.Sprintf("%.0f", r.BytesPerOp), strconv.Itoa(r.Errors))
		}
		t.write(w)
	}
}

func (rep *report) printHotKey(w io.Writer) {
	if rs := rep.byWorkload("redis", "hotkey"); len(rs) > 0 {
		fmt.Fprintln(w, "Redis, hot key: all goroutines lock one key and hold it for CS")
		t := table{header: []string{"G", "CS", "library", "acq/s", "wait p50", "wait p99", "wait max", "min/g", "max/g", "gave up", "errors"}, left: 3}
		for _, r := range rs {
			t.add(strconv.Itoa(r.Goroutines), r.CS.String(), r.Library, fmtRate(r.OpsPerSec),
				fmtDur(r.LockP50), fmtDur(r.LockP99), fmtDur(r.LockMax),
				strconv.Itoa(r.MinPerG), strconv.Itoa(r.MaxPerG), strconv.Itoa(r.GaveUp), strconv.Itoa(r.Errors))
		}
		t.write(w)
	}
}

func (rep *report) printHandoff(w io.Writer) {
	if rs := rep.byWorkload("redis", "handoff", "handoff-os"); len(rs) > 0 {
		fmt.Fprintln(w, "Redis, handoff: holder releases, a waiter in another client (handoff) or process (handoff-os) takes the lock")
		t := table{header: []string{"cell", "library", "handoffs", "from return p50", "p99", "from call p50", "p99", "RTT p50", "p50 in RTT (return/call)", "errors"}, left: 2}
		for _, r := range rs {
			rtts := "-"
			if rtt := float64(r.RTTP50); rtt > 0 {
				rtts = fmt.Sprintf("%.1f / %.1f", float64(r.HandoffReturnP50)/rtt, float64(r.HandoffCallP50)/rtt)
			}
			t.add(r.Workload, r.Library, strconv.Itoa(r.Ops), fmtDur(r.HandoffReturnP50), fmtDur(r.HandoffReturnP99),
				fmtDur(r.HandoffCallP50), fmtDur(r.HandoffCallP99), fmtDur(r.RTTP50), rtts, strconv.Itoa(r.Errors))
		}
		t.write(w)
	}
}

func (rep *report) printQuorum(w io.Writer) {
	if rs := rep.byWorkload("redis", "quorum"); len(rs) > 0 {
		fmt.Fprintln(w, "Redis, quorum (Redlock): one goroutine, uncontended, over N independent servers (N=1: the uncontended G=1 cell)")
		t := table{header: []string{"N", "library", "lock p50", "lock p99", "pair p50", "pairs/s", "lock p50 x N=1", "client CPU/op", "server CPU/op", "errors"}, left: 2}
		for _, lib := range libraries {
			if lib.store != "redis" {
				continue
			}
			ref := lib.ref
			if ref == "" {
				ref = lib.name
			}
			one, ok := rep.find("redis/uncontended/G=1/" + ref)
			rows := []result{}
			if ok {
				rows = append(rows, one)
			}
			for _, r := range rs {
				if r.Library == lib.name {
					rows = append(rows, r)
				}
			}
			if len(rows) < 2 {
				continue
			}
			for _, r := range rows {
				ratio := "-"
				if ok && one.LockP50 > 0 {
					ratio = fmt.Sprintf("%.2f", float64(r.LockP50)/float64(one.LockP50))
				}
				t.add(strconv.Itoa(r.Servers), lib.name, fmtDur(r.LockP50), fmtDur(r.LockP99), fmtDur(r.PairP50),
					fmtRate(r.OpsPerSec), ratio, fmtDur(r.ClientCPUPerOp), fmtDur(r.ServerCPUPerOp), strconv.Itoa(r.Errors))
			}
		}
		t.write(w)
	}
}

func (rep *report) printQuorumConcurrent(w io.Writer) {
	if rs := rep.byWorkload("redis", "quorum-concurrent"); len(rs) > 0 {
		fmt.Fprintf(w, "Redis, quorum (Redlock): %d goroutines, each on a key of its own, through one client, over N independent servers\n", quorumG)
		t := table{header: []string{"N", "library", "pairs/s", "x redsync", "lock p50", "lock p99", "pair p50", "client CPU/op", "server CPU/op", "errors"}, left: 2}
		for _, r := range rs {
			ratio := "-"
			if ref, ok := rep.find(fmt.Sprintf("redis/quorum-concurrent/N=%d/G=%d/redsync", r.Servers, quorumG)); ok && ref.OpsPerSec > 0 {
				ratio = fmt.Sprintf("%.2f", r.OpsPerSec/ref.OpsPerSec)
			}
			t.add(strconv.Itoa(r.Servers), r.Library, fmtRate(r.OpsPerSec), ratio, fmtDur(r.LockP50), fmtDur(r.LockP99), fmtDur(r.PairP50),
				fmtDur(r.ClientCPUPerOp), fmtDur(r.ServerCPUPerOp), strconv.Itoa(r.Errors))
		}
		t.write(w)
	}
}

// printErrors lists the cells with errors, and the cells skipped.
func (rep *report) printErrors(w io.Writer) {
	var errLines []string
	for _, r := range rep.Results {
		if r.Errors > 0 {
			errLines = append(errLines, fmt.Sprintf("  %s: %d errors, first: %s", r.Cell, r.Errors, r.FirstErr))
		}
	}
	if len(errLines) > 0 {
		fmt.Fprintln(w, "Errors:")
		fmt.Fprintln(w, strings.Join(errLines, "\n"))
		fmt.Fprintln(w)
	}
	if len(rep.Skipped) > 0 {
		fmt.Fprintln(w, "Skipped:")
		for _, s := range rep.Skipped {
			fmt.Fprintln(w, "  "+s)
		}
		fmt.Fprintln(w)
	}
}

func (rep *report) printTargets(w io.Writer) {
	if len(rep.Targets) > 0 {
		fmt.Fprintln(w, "Targets for dlock (measured: dlock over the reference, or the value itself where the reference is -)")
		t := table{header: []string{"status", "target", "reference", "measured", "goal", "from"}, left: 3}
		for _, tg := range rep.Targets {
			t.add(tg.Status, tg.Name, tg.Reference, tg.Measured, tg.Goal, tg.Detail)
		}
		t.write(w)
	}
}

// printLegs writes the legs of the handoffs across processes on Redis.
func (rep *report) printLegs(w io.Writer) {
	t := table{header: []string{"library", "handoffs", "release send", "release reply", "delivery", "wake", "waiter extra", "acquire reply",
		"holder cmds", "waiter cmds", "most frequent sequence (H holder, W waiter)"}, left: 1}
	for _, r := range rep.Results {
		if g := r.Legs; g != nil && r.Store == "redis" {
			t.add(r.Library, strconv.Itoa(g.Handoffs), fmtDur(g.ReleaseSend), fmtDur(g.ReleaseReply), fmtDur(g.Delivery), fmtDur(g.Wake),
				fmtDur(g.Extra), fmtDur(g.AcquireReply), fmt.Sprintf("%.1f", g.HolderCmds), fmt.Sprintf("%.1f", g.WaiterCmds), g.Sequence)
		}
	}
	if len(t.rows) > 0 {
		fmt.Fprintln(w, "Redis, handoff-os legs (medians, from the server's MONITOR log and a PSUBSCRIBE * spy in the bench): release call -> server runs it (send) -> call returns (reply);",
			"server runs it -> spy reads the notification (delivery); -> waiter's first command (wake); -> its last (waiter extra); -> its Lock returns (acquire reply)")
		t.write(w)
	}
}

// printConsensus writes the tables of the consensus stores (etcd and
// ZooKeeper), where dlock is compared with the store's own recipe: "x
// native" is the median, over the cell's rounds, of dlock's round median
// divided by the native recipe's in the same round.
func (rep *report) printConsensus(w io.Writer) {
	var un, hot, fifo, ho []result
	for _, st := range []string{"etcd", "zk", "nats"} {
		un = append(un, rep.byWorkload(st, "uncontended")...)
		hot = append(hot, rep.byWorkload(st, "hotkey")...)
		fifo = append(fifo, rep.byWorkload(st, "fifo")...)
		ho = append(ho, rep.byWorkload(st, "handoff", "handoff-os")...)
	}
	ratio := func(r result, pick func(result) []time.Duration) string {
		n, ok := rep.native(r)
		if !ok {
			return "-"
		}
		m, lo, hi := roundRatio(pick(r), pick(n))
		if m == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f (%.2f-%.2f)", m, lo, hi)
	}
	roundLock := func(r result) []time.Duration { return r.RoundLockP50 }
	roundHandoff := func(r result) []time.Duration { return r.RoundHandoffP50 }

	if len(un) > 0 {
		fmt.Fprintln(w, "etcd and ZooKeeper, uncontended: lock/unlock pairs, each goroutine on its own key")
		t := table{header: []string{"store", "G", "library", "pairs/s", "lock p50", "lock p99", "pair p50", "lock p50 x native (range)", "client CPU/op", "errors"}, left: 3}
		for _, r := range un {
			t.add(r.Store, strconv.Itoa(r.Goroutines), r.Library, fmtRate(r.OpsPerSec),
				fmtDur(r.LockP50), fmtDur(r.LockP99), fmtDur(r.PairP50), ratio(r, roundLock),
				fmtDur(r.ClientCPUPerOp), strconv.Itoa(r.Errors))
		}
		t.write(w)
	}
	if len(hot) > 0 {
		fmt.Fprintln(w, "etcd and ZooKeeper, hot key: all goroutines lock one key and hold it for CS (handoffs: see below)")
		t := table{header: []string{"store", "G", "CS", "library", "acq/s", "wait p50", "wait p99", "wait max", "min/g", "max/g", "gave up", "errors"}, left: 4}
		for _, r := range hot {
			t.add(r.Store, strconv.Itoa(r.Goroutines), r.CS.String(), r.Library, fmtRate(r.OpsPerSec),
				fmtDur(r.LockP50), fmtDur(r.LockP99), fmtDur(r.LockMax),
				strconv.Itoa(r.MinPerG), strconv.Itoa(r.MaxPerG), strconv.Itoa(r.GaveUp), strconv.Itoa(r.Errors))
		}
		t.write(w)
	}
	if len(hot)+len(fifo)+len(ho) > 0 {
		fmt.Fprintln(w, "etcd and ZooKeeper, handoff: from the holder calling release to the next holder's Lock returning")
		t := table{header: []string{"store", "cell", "library", "acq/s", "handoffs", "p50", "mean", "p99", "max", "p50 x native (range)", "out of order", "errors"}, left: 3}
		for _, st := range []string{"etcd", "zk", "nats"} {
			for _, rs := range [][]result{fifo, hot, ho} {
				for _, r := range rs {
					if r.Store != st {
						continue
					}
					ooo := "-"
					if r.Workload == "fifo" {
						ooo = strconv.Itoa(r.OutOfOrder)
						if r.Unconfirmed > 0 {
							ooo += fmt.Sprintf(" (%d joins unconfirmed)", r.Unconfirmed)
						}
					}
					acq := fmtRate(r.OpsPerSec)
					if strings.HasPrefix(r.Workload, "handoff") {
						acq = "-"
					}
					t.add(r.Store, strings.TrimSuffix(strings.TrimPrefix(r.Cell, r.Store+"/"), "/"+r.Library), r.Library, acq, strconv.Itoa(r.Handoffs),
						fmtDur(r.HandoffCallP50), fmtDur(r.HandoffCallMean), fmtDur(r.HandoffCallP99), fmtDur(r.HandoffCallMax),
						ratio(r, roundHandoff), ooo, strconv.Itoa(r.Errors))
				}
			}
		}
		t.write(w)
	}
}

// printProcs writes the hot-key-across-processes tables: every cell, then
// the waiter scaling (the CS=1ms cells by number of processes).
func (rep *report) printProcs(w io.Writer) {
	var rs []result
	for _, st := range storeList {
		rs = append(rs, rep.byWorkload(st.name, "hotkey-procs", "hotkey-os")...)
	}
	if len(rs) == 0 {
		return
	}
	fmt.Fprintln(w, "Hot key across processes: G goroutines (hotkey-procs) or OS processes (hotkey-os), a Client each (own connection pool, session, subscription), lock one key and hold it for CS")
	t := table{header: []string{"store", "cell", "G", "CS", "library", "acq/s", "x shared", "wait p50", "wait p99", "wait max", "fairness", "min/g", "max/g",
		"handoff p50", "handoff p99", "server CPU/acq", "client CPU/acq", "gave up", "errors"}, left: 5}
	for _, r := range rs {
		shared := "-"
		if o, ok := rep.shared(r); ok && o.OpsPerSec > 0 {
			shared = fmt.Sprintf("%.2f", r.OpsPerSec/o.OpsPerSec)
		}
		t.add(r.Store, r.Workload, strconv.Itoa(r.Goroutines), r.CS.String(), r.Library, fmtRate(r.OpsPerSec), shared,
			fmtDur(r.LockP50), fmtDur(r.LockP99), fmtDur(r.LockMax), fmt.Sprintf("%.2f", r.Fairness),
			strconv.Itoa(r.MinPerG), strconv.Itoa(r.MaxPerG), fmtDur(r.HandoffCallP50), fmtDur(r.HandoffCallP99),
			fmtDur(r.ServerCPUPerOp), fmtDur(r.ClientCPUPerOp), strconv.Itoa(r.GaveUp), strconv.Itoa(r.Errors))
	}
	t.write(w)

	// Waiter scaling: the CS=1ms cells, one row per store and library,
	// one group of columns per number of processes.
	var gs []int
	for _, r := range rs {
		if r.CS == time.Millisecond && !slices.Contains(gs, r.Goroutines) {
			gs = append(gs, r.Goroutines)
		}
	}
	slices.Sort(gs)
	if len(gs) < 2 {
		return
	}
	fmt.Fprintln(w, "Waiter scaling: hot key across processes, CS=1ms, by number of processes; server CPU per acquisition, and its largest over its smallest")
	hdr := []string{"store", "cell", "library"}
	for _, g := range gs {
		hdr = append(hdr, fmt.Sprintf("G=%d acq/s", g), "fairness", "server CPU/acq")
	}
	t = table{header: append(hdr, "CPU/acq max/min"), left: 3}
	for _, st := range storeList {
		for _, lib := range libraries {
			for _, wl := range []string{"hotkey-procs", "hotkey-os"} {
				if lib.store != st.name {
					continue
				}
				row := []string{st.name, wl, lib.name}
				any := false
				for _, g := range gs {
					r, ok := rep.find(fmt.Sprintf("%s/%s/G=%d/CS=1ms/%s", st.name, wl, g, lib.name))
					if !ok {
						row = append(row, "-", "-", "-")
						continue
					}
					any = true
					row = append(row, fmtRate(r.OpsPerSec), fmt.Sprintf("%.2f", r.Fairness), fmtDur(r.ServerCPUPerOp))
				}
				if !any {
					continue
				}
				ratio := "-"
				if m, ok := rep.cpuSpread(st.name+"/"+wl, lib.name, gs); ok {
					ratio = fmt.Sprintf("%.2f", m)
				}
				t.add(append(row, ratio)...)
			}
		}
	}
	t.write(w)
}

// shared returns the one-Client-shared counterpart of a hot-key-across-
// processes result (the hotkey cell of the same G, CS and library, where
// the goroutines share -clients Clients), if it ran without errors.
func (rep *report) shared(r result) (result, bool) {
	return rep.find(r.Store + "/hotkey/" + strings.TrimPrefix(r.Cell, r.Store+"/"+r.Workload+"/"))
}

// cpuSpread returns the largest server CPU per acquisition over the smallest
// among the hot-key-across-processes cells of a store and workload
// ("redis/hotkey-os") with CS=1ms and the given numbers of processes, for
// lib; ok only if at least two of them ran and the server's CPU time is
// known.
func (rep *report) cpuSpread(workload, lib string, gs []int) (float64, bool) {
	var cpu []time.Duration
	for _, g := range gs {
		r, ok := rep.find(fmt.Sprintf("%s/G=%d/CS=1ms/%s", workload, g, lib))
		if !ok {
			continue
		}
		if r.ServerCPUPerOp <= 0 {
			return 0, false
		}
		cpu = append(cpu, r.ServerCPUPerOp)
	}
	if len(cpu) < 2 {
		return 0, false
	}
	return float64(slices.Max(cpu)) / float64(slices.Min(cpu)), true
}

// table is an aligned text table: the first left columns are left-aligned,
// the others right-aligned.
type table struct {
	header []string
	rows   [][]string
	left   int
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) {
	width := make([]int, len(t.header))
	for _, row := range append([][]string{t.header}, t.rows...) {
		for i, c := range row {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	for _, row := range append([][]string{t.header}, t.rows...) {
		var b strings.Builder
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			if i > 0 {
				b.WriteString("  ")
			}
			if i < t.left {
				b.WriteString(c + pad)
			} else {
				b.WriteString(pad + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	fmt.Fprintln(w)
}

// fmtDur prints a duration with three significant digits or so.
func fmtDur(d time.Duration) string {
	if d < 0 {
		return "-" + fmtDur(-d)
	}
	switch {
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Round(time.Microsecond)/time.Microsecond)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func fmtRate(r float64) string { return strconv.FormatFloat(r, 'f', 0, 64) }
