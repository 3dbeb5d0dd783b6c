package check

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
)

const ms = int64(time.Millisecond)

// holdEvents are the events of one complete hold: acquired at acq with the
// lock valid until valid, released at end, the counter read as n-1 and
// written as n, the token fenced (accepted or not).
func holdEvents(id int, token uint64, acq, valid, end int64, n int64, accepted bool) []event {
	return []event{
		{Kind: evAcquired, Hold: id, At: acq, Token: token, Valid: valid},
		{Kind: evRead, Hold: id, At: acq + ms, N: n - 1},
		{Kind: evWrote, Hold: id, At: acq + 2*ms, N: n, OK: true},
		{Kind: evFenced, Hold: id, Start: acq + 2*ms, At: acq + 3*ms, Token: token, OK: accepted},
		{Kind: evReleased, Hold: id, At: end, Valid: valid},
	}
}

func analyseEvents(counter int64, caps dlock.Capabilities, events ...[]event) *Report {
	r := &run{cfg: Config{TTL: time.Second}}
	for i, evs := range events {
		r.workers = append(r.workers, &worker{id: i + 1, events: evs, exited: 1000 * ms})
	}
	return r.analyse(0, 1000*ms, counter, 0, caps)
}

func checkNamed(t *testing.T, rep *Report, name string) Check {
	t.Helper()
	for _, c := range rep.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", name, rep.Checks)
	return Check{}
}

func TestAnalyseCleanRun(t *testing.T) {
	rep := analyseEvents(2, dlock.Capabilities{DurableTokens: true},
		holdEvents(1, 1, 10*ms, 110*ms, 20*ms, 1, true),
		holdEvents(1, 2, 30*ms, 130*ms, 40*ms, 2, true))
	if !rep.OK || rep.Acquisitions != 2 || rep.Overlaps != 0 || rep.LostUpdates != 0 || rep.FencedAccepted != 2 {
		t.Errorf("clean run: %+v", rep)
	}
}

// A second holder acquiring while the first's lock is valid breaks mutual
// exclusion, whatever the counter says.
func TestAnalyseOverlapWhileValid(t *testing.T) {
	rep := analyseEvents(1, dlock.Capabilities{DurableTokens: true},
		holdEvents(1, 1, 10*ms, 110*ms, 50*ms, 1, true),
		holdEvents(1, 2, 30*ms, 130*ms, 60*ms, 1, true))
	if rep.OK || rep.Overlaps != 1 || rep.Violations != 1 || rep.LostUpdates != 1 {
		t.Errorf("overlap while valid: OK %v, %d overlaps, %d violations, %d lost", rep.OK, rep.Overlaps, rep.Violations, rep.LostUpdates)
	}
	if c := checkNamed(t, rep, "no unexplained lost update"); c.OK {
		t.Errorf("lost update while mutual exclusion was broken judged OK: %s", c.Detail)
	}
	if len(rep.ViolationSamples) != 1 || !strings.Contains(rep.ViolationSamples[0], "worker 2 acquired") {
		t.Errorf("violation samples = %q; want one naming worker 2's acquisition", rep.ViolationSamples)
	}
}

// A holder that went on past its lock's validity (paused) and was told it
// lost the lock is fencing's case: its lost update is explained, its stale
// write is rejected, the run passes.
func TestAnalyseHolderPastValidity(t *testing.T) {
	paused := holdEvents(1, 1, 10*ms, 110*ms, 400*ms, 1, false)
	paused = append(paused[:4:4], event{Kind: evLost, Hold: 1, At: 390 * ms, Valid: 110 * ms}, paused[4])
	paused[4+1].Err = "lost"
	rep := analyseEvents(1, dlock.Capabilities{DurableTokens: true},
		paused,
		holdEvents(1, 2, 200*ms, 300*ms, 210*ms, 1, true))
	if !rep.OK || rep.Overlaps != 1 || rep.Violations != 0 || rep.LostUpdates != 1 || rep.FencedRejected != 1 || rep.TakenOver != 1 || rep.LostSignalBefore != 0 {
		t.Errorf("holder past validity: %+v", rep)
	}
	// Had it not been told (no lost signal, a release that failed for
	// another reason), the lost signal check fails; had its release
	// succeeded, mutual exclusion would have.
	paused[4] = event{Kind: evError, Hold: 1, At: 390 * ms, Err: "x"}
	paused[5].Err = "connection refused"
	rep = analyseEvents(1, dlock.Capabilities{DurableTokens: true}, paused, holdEvents(1, 2, 200*ms, 300*ms, 210*ms, 1, true))
	if c := checkNamed(t, rep, "lost signal"); c.OK || rep.OK {
		t.Errorf("an uninformed holder taken over judged OK: %s", c.Detail)
	}
	paused[5].Err = ""
	rep = analyseEvents(1, dlock.Capabilities{DurableTokens: true}, paused, holdEvents(1, 2, 200*ms, 300*ms, 210*ms, 1, true))
	if c := checkNamed(t, rep, "mutual exclusion"); c.OK || rep.OK {
		t.Errorf("a release that succeeded after a takeover judged OK: %s", c.Detail)
	}
}

// Tokens that go back, and a register that accepts a lower token than one
// it accepted before, fail where tokens are durable and are only reported
// elsewhere.
func TestAnalyseFencing(t *testing.T) {
	for _, durable := range []bool{true, false} {
		rep := analyseEvents(2, dlock.Capabilities{DurableTokens: durable},
			holdEvents(1, 5, 10*ms, 110*ms, 20*ms, 1, true),
			holdEvents(1, 3, 30*ms, 130*ms, 40*ms, 2, true))
		if rep.StaleAccepted != 1 || rep.TokenRegressions != 1 {
			t.Errorf("durable %v: %d stale accepted, %d regressions; want 1 and 1", durable, rep.StaleAccepted, rep.TokenRegressions)
		}
		if c := checkNamed(t, rep, "fencing"); c.OK || c.Promised != durable || rep.OK == durable {
			t.Errorf("durable %v: fencing check %+v, report OK %v", durable, c, rep.OK)
		}
	}
}

// Lost updates with no overlapping hold mean the store lost writes.
func TestAnalyseLostWrites(t *testing.T) {
	rep := analyseEvents(1, dlock.Capabilities{DurableTokens: true},
		holdEvents(1, 1, 10*ms, 110*ms, 20*ms, 1, true),
		holdEvents(1, 2, 30*ms, 130*ms, 40*ms, 2, true))
	if rep.OK || rep.LostUpdates != 1 {
		t.Errorf("lost write with no overlap: OK %v, %d lost", rep.OK, rep.LostUpdates)
	}
	// Unless a write's outcome is unknown: it may have landed late, over
	// newer values.
	late := holdEvents(3, 3, 50*ms, 150*ms, 60*ms, 1, false)
	late[2].OK = false
	rep = analyseEvents(1, dlock.Capabilities{DurableTokens: true},
		holdEvents(1, 1, 10*ms, 110*ms, 20*ms, 1, true),
		holdEvents(1, 2, 30*ms, 130*ms, 40*ms, 2, true), late)
	if !rep.OK || rep.LostUpdates != 1 || rep.Unknown != 1 {
		t.Errorf("lost update after a write of unknown outcome: OK %v, %d lost, %d unknown", rep.OK, rep.LostUpdates, rep.Unknown)
	}
}

func TestReportText(t *testing.T) {
	rep := analyseEvents(1, dlock.Capabilities{DurableTokens: true},
		holdEvents(1, 1, 10*ms, 110*ms, 50*ms, 1, true),
		holdEvents(1, 2, 30*ms, 130*ms, 60*ms, 1, true))
	rep.Store = "redis://127.0.0.1:6379"
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"FAIL  mutual exclusion", "1 lost update\n", "\nFAIL: "} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// The longest gap is the longest time without an acquisition, the run's
// start and end included.
func TestAnalyseLongestGap(t *testing.T) {
	for _, c := range []struct {
		name    string
		acqs    []int64 // in ms, of one worker's holds
		gap, at int64   // ms
	}{
		{"between", []int64{10, 30, 700, 710}, 670, 30},
		{"from the start", []int64{400, 420, 800}, 400, 0},
		{"to the end", []int64{10, 20}, 980, 20},
		{"none", nil, 1000, 0},
	} {
		var evs []event
		for i, a := range c.acqs {
			evs = append(evs, holdEvents(i+1, uint64(i+1), a*ms, (a+100)*ms, (a+5)*ms, int64(i+1), true)...)
		}
		rep := analyseEvents(int64(len(c.acqs)), dlock.Capabilities{DurableTokens: true}, evs)
		if rep.LongestGap != time.Duration(c.gap*ms) || rep.LongestGapAt != time.Duration(c.at*ms) {
			t.Errorf("%s: longest gap %v from %v, want %v from %v", c.name, rep.LongestGap, rep.LongestGapAt,
				time.Duration(c.gap*ms), time.Duration(c.at*ms))
		}
	}
}

var update = flag.Bool("update", false, "rewrite testdata/report.* from the current output")

// A run with every kind of fault, an error, a skipped fault, a violation,
// a stale fenced write and a token that went back: the report, in text and
// JSON, is testdata/report.txt and testdata/report.json.
func TestReportGolden(t *testing.T) {
	ev := func(kind string, hold int, at int64) event { return event{Kind: kind, Hold: hold, At: at * ms} }
	acq := func(hold int, token uint64, at, valid int64) event {
		return event{Kind: evAcquired, Hold: hold, At: at * ms, Token: token, Valid: valid * ms}
	}
	rel := func(hold int, at, valid int64, err string) event {
		return event{Kind: evReleased, Hold: hold, At: at * ms, Valid: valid * ms, Err: err}
	}
	fenced := func(hold int, token uint64, at int64, ok bool, err string) event {
		return event{Kind: evFenced, Hold: hold, Start: (at - 1) * ms, At: at * ms, Token: token, OK: ok, Err: err}
	}
	wrote := func(hold int, at int64, ok bool) event { return event{Kind: evWrote, Hold: hold, At: at * ms, OK: ok} }
	r := &run{cfg: Config{TTL: 100 * time.Millisecond}, skipped: []string{"cut: not here"}}
	r.workers = []*worker{
		{id: 1, exited: 1000 * ms, events: []event{
			acq(1, 1, 10, 110), ev(evRead, 1, 11), wrote(1, 12, true), fenced(1, 1, 13, true, ""), rel(1, 20, 110, ""),
			acq(2, 3, 100, 200), ev(evRead, 2, 101), {Kind: evLost, Hold: 2, At: 420 * ms, Valid: 200 * ms},
			fenced(2, 3, 440, false, ""), rel(2, 450, 200, "lost"),
			acq(3, 7, 760, 860), ev(evRead, 3, 761), wrote(3, 762, true), fenced(3, 7, 763, true, ""), rel(3, 900, 860, ""),
			acq(4, 8, 910, 1010), fenced(4, 8, 915, false, "timeout"), rel(4, 990, 1010, ""),
		}},
		{id: 2, exited: 1000 * ms, events: []event{
			acq(1, 2, 30, 130), ev(evRead, 1, 31), wrote(1, 32, false), rel(1, 40, 130, ""),
			acq(2, 4, 300, 400), rel(2, 310, 400, ""),
			acq(3, 5, 500, 600), {Kind: evError, At: 530 * ms, Err: "dial tcp: i/o timeout"}, rel(3, 800, 600, "connection refused"),
			acq(4, 5, 920, 1020), fenced(4, 5, 930, true, ""), rel(4, 950, 1020, ""),
			{Kind: evError, At: 960 * ms, Err: "dial tcp: i/o timeout"},
		}},
		{id: 3, exited: 1000 * ms, killed: 700 * ms, events: []event{
			acq(1, 6, 650, 750), ev(evRead, 1, 651),
		}},
	}
	r.faults = []Fault{
		{Kind: FaultKill, Worker: 3, Hold: 1, Start: 700 * ms, End: 760 * ms},
		{Kind: FaultLatency, Worker: 3, Start: 50 * ms, End: 250 * ms},
		{Kind: FaultPause, Worker: 1, Hold: 2, Start: 150 * ms, End: 450 * ms},
		{Kind: FaultCut, Worker: 2, Hold: 3, Start: 520 * ms, End: 800 * ms},
	}
	rep := r.analyse(0, 1000*ms, 3, 7, dlock.Capabilities{DurableTokens: true, ServerClock: true})
	rep.Store = "redis://127.0.0.1:6379"
	var text, js bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][]byte{"testdata/report.txt": text.Bytes(), "testdata/report.json": js.Bytes()} {
		if *update {
			if err := os.WriteFile(name, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs; got:\n%s", name, got)
		}
	}
}
