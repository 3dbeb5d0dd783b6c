package check

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlockhq/dlock"
)

// Report is what a check found. Times are durations from the start of the
// workload.
type Report struct {
	Store    string `json:"store"`              // the lock store's URL, secrets redacted
	Resource string `json:"resource,omitempty"` // the resource store's URL, if separate

	// Promises are what the backend's capability flags say.
	Promises Promises `json:"promises"`

	Workers      int           `json:"workers"`
	TTL          time.Duration `json:"ttl_ns"`
	LockDelay    time.Duration `json:"lock_delay_ns,omitempty"`
	Duration     time.Duration `json:"duration_ns"`
	Acquisitions int           `json:"acquisitions"`
	// LongestGap is the longest time in the workload without an
	// acquisition by any worker (from its start to the first, between
	// two, or from the last to its end), and LongestGapAt when it began:
	// what a fault cost in availability.
	LongestGap   time.Duration `json:"longest_gap_ns"`
	LongestGapAt time.Duration `json:"longest_gap_at_ns"`
	Errors       int           `json:"errors"` // failed acquisitions and resource requests
	// ErrorSamples are the first few distinct errors.
	ErrorSamples []string `json:"error_samples,omitempty"`

	// Overlaps counts the holds during which another worker acquired the
	// lock (a hold lasts from its acquisition returning to its release
	// being called, on the host's monotonic clock). Violations are those
	// where that happened while the holder's lock was still valid by its
	// own deadline, or whose release then succeeded: mutual exclusion
	// broken by the store. The others are holders that went on working
	// after their lock had expired (paused or cut off), which fencing is
	// for.
	Overlaps   int `json:"overlapping_holds"`
	Violations int `json:"overlaps_while_valid"`
	// ViolationSamples describe the first few violations: which worker
	// held the lock with which token, until when it was valid, and when
	// which worker acquired it meanwhile (times from the start).
	ViolationSamples []string `json:"violation_samples,omitempty"`

	// Counter: increments acknowledged by the store, increments whose
	// outcome is unknown (the request failed), the final value, and the
	// updates lost (acknowledged minus final, if positive).
	Acknowledged int64 `json:"increments_acknowledged"`
	Unknown      int64 `json:"increments_unknown"`
	Final        int64 `json:"counter_final"`
	LostUpdates  int64 `json:"lost_updates"`

	// Fenced register: writes accepted, stale writes rejected, and stale
	// writes accepted (a token not higher than one accepted before the
	// write was sent: the register or the tokens went back).
	FencedAccepted      int    `json:"fenced_accepted"`
	FencedRejected      int    `json:"fenced_rejected"`
	StaleAccepted       int    `json:"stale_fenced_writes_accepted"`
	TokenRegressions    int    `json:"token_regressions"` // tokens not above a token whose hold had ended
	Register            uint64 `json:"register_final"`
	HighestToken        uint64 `json:"highest_token"`
	LostSignalBefore    int    `json:"lost_signal_before_takeover"` // holders taken over that knew first
	TakenOver           int    `json:"holders_taken_over"`          // holders still working when another acquired
	TakenOverUninformed int    `json:"holders_taken_over_uninformed"`

	Faults []Fault `json:"faults"`
	// Skipped says which faults were asked for but could not be
	// injected, and why.
	Skipped []string `json:"skipped_faults,omitempty"`
	Checks  []Check  `json:"checks"`
	OK      bool     `json:"ok"`
}

// Promises are a backend's capability flags, as they bear on safety.
type Promises struct {
	DurableTokens bool `json:"durable_tokens"`
	ServerClock   bool `json:"server_clock"`
	Consensus     bool `json:"consensus"`
	FIFO          bool `json:"fifo"`
}

// Fault is one injected fault.
type Fault struct {
	Kind   string `json:"kind"`
	Worker int    `json:"worker"`
	Hold   int    `json:"-"`
	Start  int64  `json:"-"`
	End    int64  `json:"-"`

	At  time.Duration `json:"at_ns"`  // from the start of the run
	For time.Duration `json:"for_ns"` // how long it lasted (kill: until the takeover)
	// Token is the fencing token of the hold the fault hit, 0 if the
	// worker held nothing when it struck.
	Token uint64 `json:"token,omitempty"`
	// TakenOver is the time from the fault to the next acquisition by
	// another worker; zero if there was none.
	TakenOver time.Duration `json:"takeover_ns,omitempty"`
	// LostSignal is the time from the fault to the holder's lost signal;
	// zero if it had none.
	LostSignal time.Duration `json:"lost_signal_ns,omitempty"`
	// Learned reports whether the holder had its lost signal before the
	// takeover (pause, cut, when there was a takeover).
	Learned *bool `json:"lost_signal_before_takeover,omitempty"`
	// Overlapped reports that the holder was still working when another
	// worker acquired the lock.
	Overlapped bool `json:"overlapped"`
}

// Check is one verdict of a report.
type Check struct {
	Name     string `json:"name"`
	Promised bool   `json:"promised"` // false: reported, not judged
	OK       bool   `json:"ok"`
	Detail   string `json:"detail"`
}

// hold is one acquisition, rebuilt from a worker's events.
type hold struct {
	worker, id   int
	token        uint64
	acq, end     int64
	valid        int64 // the latest deadline the worker reported
	lost         int64 // when the lost signal came; 0 if it did not
	killed       int64 // when its worker was killed, if it never released it
	released     bool
	releaseErr   string
	read, wrote  bool // the counter was read, a write was reported
	fenceStart   int64
	fenceAt      int64
	fenceOK      bool
	fenced       bool
	overlapped   bool // another worker acquired during this hold
	takenOver    bool // ... after this hold's lock had expired
	takeoverTime int64
}

// analyse rebuilds the holds from the workers' events and judges them.
func (r *run) analyse(start, end int64, counter int64, register uint64, caps dlock.Capabilities) *Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := &Report{
		Workers:   len(r.workers),
		TTL:       r.cfg.TTL,
		LockDelay: r.cfg.LockDelay,
		Duration:  time.Duration(end - start),
		Final:     counter,
		Register:  register,
		Promises:  promises(caps),
		Skipped:   r.skipped,
	}
	var holds []*hold
	for _, w := range r.workers {
		holds = append(holds, rep.replay(w)...)
	}
	rep.LostUpdates = max(0, rep.Acknowledged-counter)
	slices.SortFunc(holds, func(a, b *hold) int { return cmp.Compare(a.acq, b.acq) })
	rep.longestGap(holds, start, end)
	excused := rep.overlaps(holds, start)
	rep.takeovers(holds)
	// Stale fenced writes accepted: an accepted token not above one
	// accepted before the write was sent. Token regressions: a token not
	// above that of a hold that had ended before it was acquired.
	accepted := slices.DeleteFunc(slices.Clone(holds), func(h *hold) bool { return !h.fenced || !h.fenceOK })
	rep.StaleAccepted = notAbove(accepted, func(h *hold) int64 { return h.fenceStart }, func(h *hold) int64 { return h.fenceAt })
	rep.TokenRegressions = notAbove(holds, func(h *hold) int64 { return h.acq }, func(h *hold) int64 { return h.end })
	rep.Faults = r.faultReports(holds, start)
	rep.Checks = rep.judge(excused)
	rep.OK = !slices.ContainsFunc(rep.Checks, func(c Check) bool { return c.Promised && !c.OK })
	return rep
}

// replay rebuilds w's holds from its events, counting what they tell in rep.
func (rep *Report) replay(w *worker) []*hold {
	var holds []*hold
	byID := map[int]*hold{}
	for _, e := range w.events {
		switch h := byID[e.Hold]; {
		case e.Kind == evAcquired:
			h = &hold{worker: w.id, id: e.Hold, token: e.Token, acq: e.At, valid: e.Valid}
			byID[e.Hold] = h
			holds = append(holds, h)
			rep.Acquisitions++
			rep.HighestToken = max(rep.HighestToken, e.Token)
		case e.Kind == evError:
			rep.Errors++
			rep.sample(e.Err)
		case h != nil:
			rep.record(h, e)
		}
	}
	// A hold that was never released ended with its worker; a write it
	// may have sent before it died has an unknown outcome.
	for _, h := range byID {
		if !h.released {
			h.end, h.killed = cmp.Or(w.killed, w.exited), w.killed
			if h.read && !h.wrote {
				rep.Unknown++
			}
		}
	}
	return holds
}

// record applies e, an event of hold h, to h and rep.
func (rep *Report) record(h *hold, e event) {
	switch e.Kind {
	case evRead:
		h.read = true
	case evWrote:
		h.wrote = true
		if e.OK {
			rep.Acknowledged++
		} else {
			rep.Unknown++
		}
	case evFenced:
		h.fenced, h.fenceOK, h.fenceStart, h.fenceAt = true, e.OK, e.Start, e.At
		switch {
		case e.OK:
			rep.FencedAccepted++
		case e.Err == "":
			rep.FencedRejected++
		default:
			rep.Errors++
			rep.sample("fenced write: " + e.Err)
		}
	case evLost:
		h.lost = e.At
		h.valid = max(h.valid, e.Valid)
	case evReleased:
		h.released, h.releaseErr, h.end = true, e.Err, e.At
		h.valid = max(h.valid, e.Valid)
	}
}

// longestGap finds the longest time without an acquisition, the run's start
// and end included; holds are sorted by acquisition.
func (rep *Report) longestGap(holds []*hold, start, end int64) {
	prev := start
	for _, h := range append(holds[:len(holds):len(holds)], &hold{acq: end}) {
		if g := time.Duration(h.acq - prev); g > rep.LongestGap {
			rep.LongestGap, rep.LongestGapAt = g, time.Duration(prev-start)
		}
		prev = max(prev, h.acq)
	}
}

// overlaps sweeps holds, sorted by acquisition, for acquisitions during
// another worker's hold: violations if that hold's lock was valid or its
// release succeeded, else takeovers. It returns the number of takeovers.
func (rep *Report) overlaps(holds []*hold, start int64) (excused int) {
	var active []*hold
	for _, b := range holds {
		active = slices.DeleteFunc(active, func(a *hold) bool { return a.end <= b.acq })
		for _, a := range active {
			if a.worker == b.worker || a.overlapped {
				continue
			}
			a.overlapped = true
			rep.Overlaps++
			if b.acq < a.valid || (a.released && a.releaseErr == "") {
				rep.Violations++
				if len(rep.ViolationSamples) < maxSamples {
					rep.ViolationSamples = append(rep.ViolationSamples, violation(a, b, start))
				}
				continue
			}
			excused++
			a.takenOver, a.takeoverTime = true, b.acq
		}
		active = append(active, b)
	}
	return excused
}

// takeovers counts the holders taken over while they still worked (not
// killed before), those that had the lost signal before, and those that
// never had it.
func (rep *Report) takeovers(holds []*hold) {
	for _, h := range holds {
		if !h.takenOver || (h.killed != 0 && h.killed < h.takeoverTime) {
			continue
		}
		rep.TakenOver++
		if h.lost != 0 && h.lost <= h.takeoverTime {
			rep.LostSignalBefore++
		}
		if h.lost == 0 && h.releaseErr != "lost" {
			rep.TakenOverUninformed++
		}
	}
}

// notAbove counts the holds whose token is not above the token of a hold
// done before they began.
func notAbove(holds []*hold, began, done func(*hold) int64) int {
	byBegin, byDone := slices.Clone(holds), slices.Clone(holds)
	slices.SortFunc(byBegin, func(a, b *hold) int { return cmp.Compare(began(a), began(b)) })
	slices.SortFunc(byDone, func(a, b *hold) int { return cmp.Compare(done(a), done(b)) })
	var top uint64
	n, i := 0, 0
	for _, h := range byBegin {
		for ; i < len(byDone) && done(byDone[i]) < began(h); i++ {
			top = max(top, byDone[i].token)
		}
		if h.token <= top {
			n++
		}
	}
	return n
}

// faultReports returns the injected faults in the order they struck, with
// what followed each; holds are sorted by acquisition.
func (r *run) faultReports(holds []*hold, start int64) []Fault {
	faults := []Fault{}
	for _, f := range r.faults {
		f.At, f.For = time.Duration(f.Start-start), time.Duration(f.End-f.Start)
		if i := slices.IndexFunc(holds, func(h *hold) bool { return h.worker != f.Worker && h.acq > f.Start }); i >= 0 {
			f.TakenOver = time.Duration(holds[i].acq - f.Start)
		}
		for _, h := range holds {
			if h.worker == f.Worker && h.id == f.Hold && h.end >= f.Start {
				f.struck(h)
			}
		}
		faults = append(faults, f)
	}
	slices.SortFunc(faults, func(a, b Fault) int { return cmp.Compare(a.Start, b.Start) })
	return faults
}

// struck records what became of h, the hold that f struck.
func (f *Fault) struck(h *hold) {
	f.Token, f.Overlapped = h.token, h.overlapped
	if h.lost != 0 {
		f.LostSignal = max(0, time.Duration(h.lost-f.Start))
	}
	if f.Kind != FaultKill && f.TakenOver > 0 {
		learned := h.lost != 0 && time.Duration(h.lost-f.Start) <= f.TakenOver
		f.Learned = &learned
	}
}

// violation describes b's acquisition during a's hold.
func violation(a, b *hold, start int64) string {
	at := func(t int64) string { return fmt.Sprintf("%.3fs", time.Duration(t-start).Seconds()) }
	s := fmt.Sprintf("worker %d acquired at %s (token %d) while worker %d held the lock (token %d, acquired at %s, valid until %s",
		b.worker, at(b.acq), b.token, a.worker, a.token, at(a.acq), at(a.valid))
	if a.lost != 0 {
		s += ", told lost at " + at(a.lost)
	}
	if a.released && a.releaseErr == "" {
		s += ", released successfully at " + at(a.end)
	}
	return s + ")"
}

// maxSamples bounds Report.ErrorSamples and Report.ViolationSamples.
const maxSamples = 5

// sample keeps err as an example, if it is new and there is room. (The
// library's errors never show a URL's secrets.)
func (rep *Report) sample(err string) {
	if len(rep.ErrorSamples) < maxSamples && !slices.Contains(rep.ErrorSamples, err) {
		rep.ErrorSamples = append(rep.ErrorSamples, err)
	}
}

// judge returns the verdicts. excused is the number of overlaps whose first
// holder had outlived its lock.
func (rep *Report) judge(excused int) []Check {
	exclusion := Check{Name: "mutual exclusion", Promised: true, OK: rep.Violations == 0, Detail: "no worker acquired the lock while another's was still valid"}
	if !exclusion.OK {
		exclusion.Detail = fmt.Sprintf("%s acquired the lock while another held it and its lock was valid", plural(rep.Violations, "time a worker", "times a worker"))
	}
	// A write whose outcome is unknown (its request failed) may land at
	// any later time, over newer values: it explains lost updates too.
	updates := Check{Name: "no unexplained lost update", Promised: true, OK: rep.LostUpdates == 0 || (rep.Violations == 0 && (excused > 0 || rep.Unknown > 0))}
	switch {
	case rep.LostUpdates == 0:
		updates.Detail = "the counter has every acknowledged increment"
	case updates.OK:
		updates.Detail = fmt.Sprintf("%d lost, by holders that went on writing after their lock expired (paused or cut off) or whose writes arrived late: what fencing is for", rep.LostUpdates)
	case rep.Violations > 0:
		updates.Detail = fmt.Sprintf("%d lost while mutual exclusion was broken", rep.LostUpdates)
	default:
		updates.Detail = fmt.Sprintf("%d lost with no overlapping holds: the store lost writes", rep.LostUpdates)
	}
	fencing := Check{Name: "fencing", Promised: rep.Promises.DurableTokens, OK: rep.StaleAccepted == 0 && rep.TokenRegressions == 0,
		Detail: fmt.Sprintf("%s rejected, %d accepted; %s back", plural(rep.FencedRejected, "stale write", "stale writes"), rep.StaleAccepted, plural(rep.TokenRegressions, "token went", "tokens went"))}
	if !fencing.Promised {
		fencing.Detail += " (tokens are not durable on this backend: not promised)"
	}
	signal := Check{Name: "lost signal", Promised: true, OK: rep.TakenOverUninformed == 0, Detail: "no holder was taken over while it worked"}
	if rep.TakenOver > 0 {
		signal.Detail = fmt.Sprintf("%d of %s taken over while working had the lost signal (%d before the takeover)",
			rep.TakenOver-rep.TakenOverUninformed, plural(rep.TakenOver, "holder", "holders"), rep.LostSignalBefore)
	}
	return []Check{exclusion, updates, fencing, signal}
}

// WriteJSON writes the report as one JSON object.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteText writes the report for people.
func (rep *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	rep.writeWorkload(&b)
	rep.writeFaults(&b)
	rep.writeResults(&b)
	rep.writeChecks(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeWorkload writes the stores, their promises and the workload.
func (rep *Report) writeWorkload(b *strings.Builder) {
	fmt.Fprintf(b, "store     %s\n", rep.Store)
	if rep.Resource != "" {
		fmt.Fprintf(b, "resource  %s\n", rep.Resource)
	}
	fmt.Fprintf(b, "promises  %s\n", rep.Promises)
	delay := ""
	if rep.LockDelay > 0 {
		delay = fmt.Sprintf(", lock delay %v", rep.LockDelay)
	}
	fmt.Fprintf(b, "workload  %d workers, ttl %v%s, %.1fs: %s, %s\n",
		rep.Workers, rep.TTL, delay, rep.Duration.Seconds(), plural(rep.Acquisitions, "acquisition", "acquisitions"), plural(rep.Errors, "error", "errors"))
	fmt.Fprintf(b, "          longest time without an acquisition %v, from %.1fs\n", seconds(rep.LongestGap), rep.LongestGapAt.Seconds())
	for _, e := range rep.ErrorSamples {
		fmt.Fprintf(b, "          error: %s\n", e)
	}
	fmt.Fprintln(b)
}

// writeFaults writes the faults injected and those that could not be.
func (rep *Report) writeFaults(b *strings.Builder) {
	if len(rep.Faults) > 0 {
		fmt.Fprintln(b, "faults")
		tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
		for _, f := range rep.Faults {
			fmt.Fprintf(tw, "  %s\tworker %d\tat %.1fs\t%s\n", f.Kind, f.Worker, f.At.Seconds(), f.describe())
		}
		tw.Flush()
		fmt.Fprintln(b)
	}
	for _, sk := range rep.Skipped {
		fmt.Fprintf(b, "not injected: %s\n\n", sk)
	}
}

// writeResults writes what the workload saw: overlaps, the counter, the
// fenced register, the tokens and the faults' outcomes.
func (rep *Report) writeResults(b *strings.Builder) {
	fmt.Fprintln(b, "results")
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  overlapping holds\t%d (%d while the holder's lock was valid)\n", rep.Overlaps, rep.Violations)
	for _, v := range rep.ViolationSamples {
		fmt.Fprintf(tw, "  \t%s\n", v)
	}
	unknown := ""
	if rep.Unknown > 0 {
		unknown = fmt.Sprintf(" (and %d unknown)", rep.Unknown)
	}
	fmt.Fprintf(tw, "  counter\t%s acknowledged%s, final %d: %s\n", plural(int(rep.Acknowledged), "increment", "increments"), unknown, rep.Final, plural(int(rep.LostUpdates), "lost update", "lost updates"))
	fmt.Fprintf(tw, "  fenced register\t%s accepted, %d stale rejected, %d stale accepted\n", plural(rep.FencedAccepted, "write", "writes"), rep.FencedRejected, rep.StaleAccepted)
	fmt.Fprintf(tw, "  fencing tokens\thighest %d, %d went back\n", rep.HighestToken, rep.TokenRegressions)
	rep.writeFaultOutcomes(tw)
	tw.Flush()
	fmt.Fprintln(b)
}

// writeFaultOutcomes writes how many paused and cut-off holders had the lost
// signal before their takeover, and how long each kill took to be taken
// over.
func (rep *Report) writeFaultOutcomes(w io.Writer) {
	for _, k := range []struct{ kind, holders string }{{FaultPause, "paused holders"}, {FaultCut, "cut-off holders"}} {
		n, learned := 0, 0
		for _, f := range rep.Faults {
			if f.Kind == k.kind && f.Learned != nil {
				n++
				if *f.Learned {
					learned++
				}
			}
		}
		if n > 0 {
			fmt.Fprintf(w, "  lost signal before takeover\t%d of %d %s\n", learned, n, k.holders)
		}
	}
	for _, f := range rep.Faults {
		switch {
		case f.Kind != FaultKill || f.Token == 0:
		case f.TakenOver > 0:
			fmt.Fprintf(w, "  takeover after kill -9\t%v\n", seconds(f.TakenOver))
		default:
			fmt.Fprintf(w, "  takeover after kill -9\tnone before the run ended\n")
		}
	}
}

// writeChecks writes the verdicts and the outcome.
func (rep *Report) writeChecks(b *strings.Builder) {
	fmt.Fprintln(b, "checks")
	for _, c := range rep.Checks {
		mark := "ok  "
		switch {
		case !c.OK && c.Promised:
			mark = "FAIL"
		case !c.OK:
			mark = "seen"
		}
		fmt.Fprintf(b, "  %s  %s: %s\n", mark, c.Name, c.Detail)
	}
	if rep.OK {
		fmt.Fprintln(b, "\nPASS: everything this backend promises held")
	} else {
		fmt.Fprintln(b, "\nFAIL: the store broke a promise of its backend")
	}
}

// promises returns what a backend's capabilities promise.
func promises(caps dlock.Capabilities) Promises {
	return Promises{DurableTokens: caps.DurableTokens, ServerClock: caps.ServerClock, Consensus: caps.Consensus, FIFO: caps.FIFO}
}

// String describes the promises in words.
func (p Promises) String() string {
	var s []string
	if p.ServerClock {
		s = append(s, "leases on the store's clock")
	} else {
		s = append(s, "leases on client clocks")
	}
	if p.DurableTokens {
		s = append(s, "durable fencing tokens")
	} else {
		s = append(s, "fencing tokens not durable (efficiency locks)")
	}
	if p.Consensus {
		s = append(s, "consensus replication")
	}
	if p.FIFO {
		s = append(s, "FIFO waiters")
	}
	return strings.Join(s, ", ")
}

func (f Fault) describe() string {
	var s string
	switch f.Kind {
	case FaultLatency:
		return fmt.Sprintf("+%v each way for %.1fs", injectedLatency, f.For.Seconds())
	case FaultPause:
		s = fmt.Sprintf("SIGSTOP for %.1fs", f.For.Seconds())
	case FaultCut:
		s = fmt.Sprintf("blackholed for %.1fs", f.For.Seconds())
	case FaultKill:
		s = "SIGKILL"
	}
	if f.Token == 0 {
		return s + ", holding nothing by then"
	}
	s += fmt.Sprintf(" holding token %d:", f.Token)
	if f.Kind != FaultKill {
		if f.LostSignal > 0 {
			s += fmt.Sprintf(" lost signal after %v,", seconds(f.LostSignal))
		} else {
			s += " no lost signal,"
		}
	}
	if f.TakenOver > 0 {
		s += fmt.Sprintf(" taken over after %v", seconds(f.TakenOver))
	} else {
		s += " no takeover before the run ended"
	}
	if f.Overlapped && f.Kind != FaultKill {
		s += " while it still worked"
	}
	return s
}

// seconds rounds d for the report.
func seconds(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(10 * time.Millisecond)
}

// plural writes n and the noun in the number n needs.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
