package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// print writes the report as aligned text tables, one per workload, with
// one row per library (and parameter set).
func (rep *report) print(w io.Writer) {
	c := rep.Config
	fmt.Fprintf(w, "dlock comparison: %v per cell and library (in %d interleaved slices) after %v warm-up; TTL %v; polling libraries retry every %v; go-redis PoolSize %d; up to %d clients per library; wait budget %v\n",
		c.Duration, c.Slices, c.Warmup, c.TTL, c.Retry, c.Pool, c.Clients, c.Budget)
	fmt.Fprintf(w, "servers: %s\n", strings.Join(c.Servers, " "))
	if c.Delay > 0 {
		fmt.Fprintf(w, "every server behind a proxy that delays each direction by at least %v (Go's timers may add up to a millisecond more: the PING line shows the real round trip)\n", c.Delay)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Round trip (back-to-back PINGs on one connection, %d samples): p50 %v  p99 %v\n",
		rep.Ping.Ops, fmtDur(rep.Ping.LockP50), fmtDur(rep.Ping.LockP99))
	if rep.LoadBefore != "" {
		fmt.Fprintf(w, "load average (1/5/15 min) before: %s, after: %s\n", rep.LoadBefore, rep.LoadAfter)
	}
	fmt.Fprintln(w)

	var errLines []string
	byWorkload := func(wl string) []result {
		var rs []result
		for _, r := range rep.Results {
			if r.Workload == wl {
				rs = append(rs, r)
				if r.Errors > 0 {
					errLines = append(errLines, fmt.Sprintf("  %s: %d errors, first: %s", r.Cell, r.Errors, r.FirstErr))
				}
			}
		}
		return rs
	}

	if rs := byWorkload("uncontended"); len(rs) > 0 {
		fmt.Fprintln(w, "Uncontended: lock/unlock pairs, each goroutine on its own key")
		t := table{header: []string{"G", "library", "pairs/s", "x baseline", "lock p50", "lock p99", "pair p50", "client CPU/op", "server CPU/op", "errors"}, left: 2}
		for _, r := range rs {
			ratio := "-"
			if b, ok := rep.find(strings.TrimSuffix(r.Cell, r.Library) + "baseline"); ok {
				ratio = fmt.Sprintf("%.2f", r.OpsPerSec/b.OpsPerSec)
			}
			t.add(strconv.Itoa(r.Goroutines), r.Library, fmtRate(r.OpsPerSec), ratio,
				fmtDur(r.LockP50), fmtDur(r.LockP99), fmtDur(r.PairP50),
				fmtDur(r.ClientCPUPerOp), fmtDur(r.ServerCPUPerOp), strconv.Itoa(r.Errors))
		}
		t.write(w)
	}

	if rs := byWorkload("hotkey"); len(rs) > 0 {
		fmt.Fprintln(w, "Hot key: all goroutines lock one key and hold it for CS")
		t := table{header: []string{"G", "CS", "library", "acq/s", "wait p50", "wait p99", "wait max", "min/g", "max/g", "gave up", "errors"}, left: 3}
		for _, r := range rs {
			t.add(strconv.Itoa(r.Goroutines), r.CS.String(), r.Library, fmtRate(r.OpsPerSec),
				fmtDur(r.LockP50), fmtDur(r.LockP99), fmtDur(r.LockMax),
				strconv.Itoa(r.MinPerG), strconv.Itoa(r.MaxPerG), strconv.Itoa(r.GaveUp), strconv.Itoa(r.Errors))
		}
		t.write(w)
	}

	if rs := byWorkload("handoff"); len(rs) > 0 {
		fmt.Fprintln(w, "Handoff: holder releases, a waiter in another client takes the lock")
		t := table{header: []string{"library", "handoffs", "from return p50", "p99", "from call p50", "p99", "RTT p50", "p50 in RTT (return/call)", "errors"}, left: 1}
		for _, r := range rs {
			rtts := "-"
			if rtt := float64(r.RTTP50); rtt > 0 {
				rtts = fmt.Sprintf("%.1f / %.1f", float64(r.HandoffReturnP50)/rtt, float64(r.HandoffCallP50)/rtt)
			}
			t.add(r.Library, strconv.Itoa(r.Ops), fmtDur(r.HandoffReturnP50), fmtDur(r.HandoffReturnP99),
				fmtDur(r.HandoffCallP50), fmtDur(r.HandoffCallP99), fmtDur(r.RTTP50), rtts, strconv.Itoa(r.Errors))
		}
		t.write(w)
	}

	if rs := byWorkload("quorum"); len(rs) > 0 {
		fmt.Fprintln(w, "Quorum (Redlock): one goroutine, uncontended, over N independent servers (N=1: the uncontended G=1 cell)")
		t := table{header: []string{"N", "library", "lock p50", "lock p99", "pair p50", "pairs/s", "lock p50 x N=1", "client CPU/op", "server CPU/op", "errors"}, left: 2}
		for _, lib := range libraries {
			ref := lib.ref
			if ref == "" {
				ref = lib.name
			}
			one, ok := rep.find("uncontended/G=1/" + ref)
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

	if len(errLines) > 0 {
		fmt.Fprintln(w, "Errors:")
		fmt.Fprintln(w, strings.Join(errLines, "\n"))
		fmt.Fprintln(w)
	}

	if len(rep.Targets) > 0 {
		fmt.Fprintln(w, "Targets for dlock (issue 3)")
		t := table{header: []string{"status", "target", "measured"}, left: 3}
		for _, tg := range rep.Targets {
			t.add(tg.Status, tg.Name, tg.Detail)
		}
		t.write(w)
	}
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
