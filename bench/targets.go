package main

import (
	"fmt"
	"slices"
	"time"
)

// target is one of the targets for dlock, checked on this run.
type target struct {
	Name      string  `json:"name"`
	Reference string  `json:"reference"`
	Value     float64 `json:"value"`    // dlock's ratio to the reference, or the value itself
	Measured  string  `json:"measured"` // Value as printed
	Goal      string  `json:"goal"`     // e.g. ">= 1.30"
	Status    string  `json:"status"`   // met, missed, n/a (cells failed)
	Detail    string  `json:"detail"`
}

// row is a target before it is checked: the cells it reads (all must have
// run, else it is left out), its goal (Value at least or at most goal) and
// how to measure it on the report.
type row struct {
	name, ref string
	cells     []string
	atMost    bool
	goal      float64
	// measure returns the value, the value as printed, the numbers it
	// comes from, and whether the cells ran without errors.
	measure func() (v float64, shown, detail string, ok bool)
}

// metric is a number of a result, and how to print it.
type metric struct {
	get func(result) float64
	fmt func(float64) string
}

var (
	rate       = metric{func(r result) float64 { return r.OpsPerSec }, func(v float64) string { return fmtRate(v) + "/s" }}
	handoffP50 = metric{func(r result) float64 { return float64(r.HandoffCallP50) }, durF}
	fairness   = metric{func(r result) float64 { return r.Fairness }, func(v float64) string { return fmt.Sprintf("%.2f", v) }}
	allocs     = metric{func(r result) float64 { return r.AllocsPerOp }, func(v float64) string { return fmt.Sprintf("%.1f allocs", v) }}
	bytesPer   = metric{func(r result) float64 { return r.BytesPerOp }, func(v float64) string { return fmt.Sprintf("%.0f B", v) }}
)

func durF(v float64) string { return fmtDur(time.Duration(v)) }

// ratio is a row comparing metric m of cell a with that of cell b.
func (rep *report) ratio(name, ref, a, b string, m metric, atMost bool, goal float64) row {
	return row{name: name, ref: ref, cells: []string{a, b}, atMost: atMost, goal: goal, measure: func() (float64, string, string, bool) {
		x, ok1 := rep.find(a)
		y, ok2 := rep.find(b)
		v := m.get(x) / m.get(y)
		return v, fmt.Sprintf("%.2fx", v), m.fmt(m.get(x)) + " vs " + m.fmt(m.get(y)), ok1 && ok2 && m.get(y) > 0
	}}
}

// value is a row on metric m of cell a itself.
func (rep *report) value(name, a string, m metric, atMost bool, goal float64) row {
	return row{name: name, ref: "-", cells: []string{a}, atMost: atMost, goal: goal, measure: func() (float64, string, string, bool) {
		x, ok := rep.find(a)
		return m.get(x), m.fmt(m.get(x)), "", ok
	}}
}

// rows lists the targets: the table first (the defaults against
// the reference each names), then the checks kept from earlier rounds.
// Adding a target is adding a row here.
func (rep *report) rows() []row {
	fl := rep.Config.Fleet
	var rs []row
	rs = append(rs, rep.ratio("redis uncontended pairs/s, G=64, distinct keys: dlock", "baseline (raw SET NX PX)",
		"redis/uncontended/G=64/dlock", "redis/uncontended/G=64/baseline", rate, false, 1.3))
	for _, wl := range []string{"hotkey-os", "hotkey-procs"} {
		rs = append(rs, rep.ratio(fmt.Sprintf("redis %s G=%d CS=1ms (a Client per process), acq/s", wl, fl), "the same on -clients shared Clients (hotkey)",
			fmt.Sprintf("redis/%s/G=%d/CS=1ms/dlock", wl, fl), fmt.Sprintf("redis/hotkey/G=%d/CS=1ms/dlock", fl), rate, false, 0.95))
	}
	for _, wl := range []string{"handoff", "handoff-os"} {
		rs = append(rs, rep.ratio("redis "+wl+" p50, release call -> next holder, separate Clients", "spin (raw retrying at once)",
			"redis/"+wl+"/G=2/dlock", "redis/"+wl+"/G=2/spin", handoffP50, true, 1))
	}
	for _, n := range []int{3, 5} {
		rs = append(rs, rep.ratio(fmt.Sprintf("redis Redlock N=%d G=%d pairs/s: dlock", n, quorumG), "redsync",
			fmt.Sprintf("redis/quorum-concurrent/N=%d/G=%d/dlock", n, quorumG), fmt.Sprintf("redis/quorum-concurrent/N=%d/G=%d/redsync", n, quorumG), rate, false, 1.3))
	}
	for _, n := range []int{3, 5} {
		rs = append(rs, rep.ratio(fmt.Sprintf("redis Redlock N=%d G=1 pairs/s: dlock", n), "redsync",
			fmt.Sprintf("redis/quorum/N=%d/dlock", n), fmt.Sprintf("redis/quorum/N=%d/redsync", n), rate, false, 1))
	}
	for _, wl := range []string{"hotkey-os", "hotkey-procs"} {
		for _, cs := range []string{"0s", "1ms"} {
			rs = append(rs, rep.ratio(fmt.Sprintf("pg %s CS=%s acq/s, %d waiting processes", wl, cs, fl), "itself at 8",
				fmt.Sprintf("pg/%s/G=%d/CS=%s/dlock", wl, fl, cs), fmt.Sprintf("pg/%s/G=8/CS=%s/dlock", wl, cs), rate, false, 0.8))
		}
	}
	for _, wl := range []string{"hotkey-os", "hotkey-procs"} {
		c := "redis/" + wl + "/G=8/CS=0s/"
		rs = append(rs, rep.ratio("redis "+wl+" G=8 CS=0 acq/s", "baseline (raw poller)", c+"dlock", c+"baseline", rate, false, 0.8),
			rep.value("redis "+wl+" G=8 CS=0 fairness (Jain)", c+"dlock", fairness, false, 0.9))
	}
	for _, st := range []string{"redis", "etcd", "zk"} {
		for _, wl := range []string{"hotkey-os", "hotkey-procs"} {
			rs = append(rs, rep.cpuRow(st, wl))
		}
	}
	rs = append(rs, rep.ratio("redis uncontended G=1 allocations per pair: dlock", "redislock",
		"redis/uncontended/G=1/dlock", "redis/uncontended/G=1/redislock", allocs, true, 1),
		rep.ratio("redis uncontended G=1 bytes allocated per pair: dlock", "redislock",
			"redis/uncontended/G=1/dlock", "redis/uncontended/G=1/redislock", bytesPer, true, 1))

	// Kept from earlier rounds.
	rs = append(rs, rep.value(fmt.Sprintf("redis hotkey-procs G=%d CS=1ms fairness (Jain)", fl), fmt.Sprintf("redis/hotkey-procs/G=%d/CS=1ms/dlock", fl), fairness, false, 0.9))
	rs = append(rs, rep.rttRows()...)
	hk := "redis/hotkey/G=64/CS=1ms/dlock"
	rs = append(rs, rep.value("redis hotkey G=64 CS=1ms: give-ups", hk, metric{func(r result) float64 { return float64(r.GaveUp) }, fmtRate}, true, 0),
		row{name: "redis hotkey G=64 CS=1ms wait p99", ref: "3 x (64 x 1ms)", cells: []string{hk}, atMost: true, goal: 1, measure: func() (float64, string, string, bool) {
			r, ok := rep.find(hk)
			lim := 3 * 64 * time.Millisecond
			v := float64(r.LockP99) / float64(lim)
			return v, fmt.Sprintf("%.2fx", v), fmtDur(r.LockP99) + " vs " + fmtDur(lim), ok
		}},
		rep.ratio("redis Redlock N=5 lock p50: dlock", "dlock on one server (uncontended G=1)", "redis/quorum/N=5/dlock", "redis/uncontended/G=1/dlock",
			metric{func(r result) float64 { return float64(r.LockP50) }, durF}, true, 1.5))
	for _, st := range []string{"etcd", "zk"} {
		rs = append(rs, rep.consensusRows(st)...)
	}
	return rs
}

// cpuRow is the server CPU per acquisition of dlock over the waiter counts
// of a store's hot-key-across-processes cells: the largest over the
// smallest.
func (rep *report) cpuRow(store, wl string) row {
	var names []string
	var gs []int
	for _, g := range rep.Config.Waiters {
		gs = append(gs, g)
		names = append(names, fmt.Sprintf("%s/%s/G=%d/CS=1ms/dlock", store, wl, g))
	}
	if len(gs) < 2 {
		names = nil // no spread to take
	}
	return row{name: fmt.Sprintf("%s %s CS=1ms server CPU/acq over %v waiters: max/min", store, wl, gs), ref: "itself", cells: names, atMost: true, goal: 1.5,
		measure: func() (float64, string, string, bool) {
			v, ok := rep.cpuSpread(store+"/"+wl, "dlock", gs)
			detail := ""
			for _, n := range names {
				r, okN := rep.find(n)
				ok = ok && okN
				detail += fmt.Sprintf("G=%d %v; ", r.Goroutines, fmtDur(r.ServerCPUPerOp))
			}
			return v, fmt.Sprintf("%.2f", v), detail, ok
		}}
}

// rttRows check the handoff against two round trips, with two measures of
// one: the baseline's one-command latency (its uncontended SET NX PX, back
// to back), and a PING measured inside the handoff cell after the same idle
// time as the release.
func (rep *report) rttRows() []row {
	h := "redis/handoff/G=2/dlock"
	mk := func(ref string, cells []string, rtt func() (time.Duration, bool)) row {
		return row{name: "redis handoff p50 from release returning, in round trips", ref: ref, cells: cells, atMost: true, goal: 2,
			measure: func() (float64, string, string, bool) {
				r, ok1 := rep.find(h)
				d, ok2 := rtt()
				v := float64(r.HandoffReturnP50) / float64(d)
				return v, fmt.Sprintf("%.1f RTT", v), fmtDur(r.HandoffReturnP50) + " vs " + fmtDur(d), ok1 && ok2 && d > 0
			}}
	}
	b1 := "redis/uncontended/G=1/baseline"
	return []row{
		mk("baseline's one-command lock p50", []string{h, b1}, func() (time.Duration, bool) { r, ok := rep.find(b1); return r.LockP50, ok }),
		mk("in-cell PING p50", []string{h}, func() (time.Duration, bool) { r, ok := rep.find(h); return r.RTTP50, ok }),
	}
}

// consensusRows check dlock against the store's own recipe.
func (rep *report) consensusRows(st string) []row {
	un, fifo := st+"/uncontended/G=1/dlock", st+"/fifo/G=8/CS=1ms/dlock"
	native := ""
	for _, lib := range libraries {
		if lib.store == st && lib.native {
			native = lib.name
		}
	}
	return []row{
		{name: st + " uncontended G=1 lock p50 (median of per-round ratios)", ref: native, cells: []string{un, st + "/uncontended/G=1/" + native}, atMost: true, goal: 1.1,
			measure: func() (float64, string, string, bool) {
				d, ok := rep.find(un)
				n, okN := rep.native(d)
				v, lo, hi := roundRatio(d.RoundLockP50, n.RoundLockP50)
				return v, fmt.Sprintf("%.2fx", v), fmt.Sprintf("%v vs %v, rounds %.2f-%.2f", fmtDur(d.LockP50), fmtDur(n.LockP50), lo, hi), ok && okN && v > 0
			}},
		rep.value(st+" fifo G=8 CS=1ms handoff p50", fifo, handoffP50, true, float64(5*time.Millisecond)),
		{name: st + " fifo G=8: acquisitions out of order", ref: "-", cells: []string{fifo}, atMost: true, goal: 0,
			measure: func() (float64, string, string, bool) {
				f, ok := rep.find(fifo)
				return float64(f.OutOfOrder), fmt.Sprint(f.OutOfOrder), fmt.Sprintf("of %d", f.Ops), ok && f.Unconfirmed == 0
			}},
	}
}

// evaluate checks the targets on the cells that ran: a target whose cells
// did not all run (or that has none) is left out, one whose cells failed
// is n/a.
func (rep *report) evaluate() []target {
	var ts []target
	for _, r := range rep.rows() {
		if len(r.cells) == 0 || !rep.ran(r.cells...) {
			continue
		}
		v, shown, detail, ok := r.measure()
		t := target{Name: r.name, Reference: r.ref, Value: v, Measured: shown, Detail: detail, Status: "n/a"}
		if t.Goal = fmt.Sprintf(">= %.2f", r.goal); r.atMost {
			t.Goal = fmt.Sprintf("<= %.2f", r.goal)
		}
		if r.goal >= float64(time.Microsecond) {
			t.Goal = t.Goal[:3] + durF(r.goal)
		}
		switch {
		case !ok:
			t.Measured, t.Detail = "-", "cells missing or failed"
		case r.atMost && v <= r.goal || !r.atMost && v >= r.goal:
			t.Status = "met"
		default:
			t.Status = "missed"
		}
		ts = append(ts, t)
	}
	return ts
}

// ran reports whether all the named cells ran (with or without errors).
func (rep *report) ran(names ...string) bool {
	for _, n := range names {
		if !slices.ContainsFunc(rep.Results, func(r result) bool { return r.Cell == n }) {
			return false
		}
	}
	return true
}
