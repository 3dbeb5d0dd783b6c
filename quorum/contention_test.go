package quorum_test

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// contenderEnv makes the test binary a contender of
// TestContendedFailover: its value is the redlock:// URL.
const contenderEnv = "DLOCK_QUORUM_TEST_CONTENDER"

// contendedTTL is the lease of the contenders. The test's one time bound
// is twice as long: the longest time without an acquisition while a
// minority of the nodes is down.
const contendedTTL = time.Second

// contenderHold is how long a contender works while it holds the lock.
const contenderHold = 20 * time.Millisecond

var contentionRuns = flag.Int("contention.runs", 2, "faults of TestContendedFailover: one paused, one killed by default; -contention.runs=10 for the acceptance run")

// contender takes and releases contendedKey in a loop until its standard
// input closes, printing "acquired NANOS" (the wall clock) after each
// acquisition and "error: ..." for every error.
func contender(url string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	slog.SetDefault(quietLog) // the nodes' warnings
	c, err := dlock.Open(ctx, url, dlock.WithLogger(quietLog))
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	defer c.Close()
	for ctx.Err() == nil {
		l, err := c.Lock(ctx, contendedKey, dlock.WithTTL(contendedTTL))
		if err != nil {
			if ctx.Err() == nil {
				fmt.Println("error: Lock:", time.Now().Format("15:04:05.000"), err)
			}
			continue
		}
		fmt.Println("acquired", time.Now().UnixNano())
		time.Sleep(contenderHold) // the work done under the lock
		if err := l.Release(context.WithoutCancel(ctx)); err != nil {
			fmt.Println("error: Release:", time.Now().Format("15:04:05.000"), err)
		}
	}
	return 0
}

const contendedKey = "contended"

// contenders runs n contenders over url and collects their acquisitions.
type contenders struct {
	mu       sync.Mutex
	acquired []time.Time
	errs     []string
	changed  chan struct{} // receives after each acquisition (capacity 1)
}

func startContenders(t *testing.T, url string, n int) *contenders {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cs := &contenders{changed: make(chan struct{}, 1)}
	var (
		reads  sync.WaitGroup
		cmds   []*exec.Cmd
		stops  []io.Closer
		stderr = make([]bytes.Buffer, n)
	)
	t.Cleanup(func() {
		for _, stop := range stops {
			stop.Close() // the contender stops
		}
		reads.Wait()
		for i, cmd := range cmds {
			if err := cmd.Wait(); err != nil {
				t.Errorf("contender %d: %v\n%s", i, err, stderr[i].String())
			}
		}
	})
	for i := range n {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), contenderEnv+"="+url, "GORACE=atexit_sleep_ms=0")
		cmd.Stderr = &stderr[i] // the Redis client's log, a panic
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, stops = append(cmds, cmd), append(stops, stdin)
		reads.Go(func() {
			for lines := bufio.NewScanner(stdout); lines.Scan(); {
				cs.record(lines.Text())
			}
		})
	}
	return cs
}

func (cs *contenders) record(line string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if s, ok := strings.CutPrefix(line, "acquired "); ok {
		if ns, err := strconv.ParseInt(s, 10, 64); err == nil {
			cs.acquired = append(cs.acquired, time.Unix(0, ns))
			select {
			case cs.changed <- struct{}{}:
			default:
			}
			return
		}
	}
	cs.errs = append(cs.errs, line)
}

// acquiredAfter waits until a contender has acquired the lock after t, or
// until ctx ends.
func (cs *contenders) acquiredAfter(ctx context.Context, t time.Time) bool {
	for {
		cs.mu.Lock()
		n := len(cs.acquired)
		ok := n > 0 && cs.acquired[n-1].After(t)
		cs.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-cs.changed:
		case <-ctx.Done():
			return false
		}
	}
}

// longestGap returns the longest time without an acquisition around the
// fault from start to end: from the last acquisition before start to the
// first one after end.
func (cs *contenders) longestGap(start, end time.Time) time.Duration {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	times := slices.Clone(cs.acquired)
	slices.SortFunc(times, time.Time.Compare)
	var gap time.Duration
	var prev time.Time
	for _, at := range times {
		if !prev.IsZero() && !at.Before(start) {
			gap = max(gap, at.Sub(prev))
		}
		prev = at
		if at.After(end) {
			break
		}
	}
	return gap
}

// TestContendedFailover runs four contender processes on one key over
// five Redis servers, and stops two of the servers for six seconds, by
// SIGSTOP and SIGCONT, then by SIGKILL and a restart with nothing, in turn
// (twice by default; -contention.runs=10 for ten faults): the three live
// servers must hand the lock on, rather than split their votes among the
// contenders, so that the longest time without an acquisition stays under
// two leases.
func TestContendedFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no database servers")
	}
	const stopFor = 6 * time.Second
	srv, err := testsrv.StartRedisQuorum(context.Background(), 5)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	servers := srv.Members()
	cs := startContenders(t, srv.URL, 4)
	if !cs.acquiredAfter(faultCtx(t), time.Time{}) {
		t.Fatal("no contender acquired the lock")
	}
	var gaps []time.Duration
	for run := range *contentionRuns {
		down := []*testsrv.Server{servers[(2*run)%5], servers[(2*run+1)%5]}
		kill := run%2 == 1
		start := time.Now()
		for _, s := range down {
			if kill {
				err = s.Kill()
			} else {
				err = s.Pause()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(stopFor) // the fault lasts this long
		for _, s := range down {
			if kill {
				err = s.Restart(faultCtx(t))
			} else {
				err = s.Resume()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		end := time.Now()
		if !cs.acquiredAfter(faultCtx(t), end) {
			t.Fatalf("fault %d: no contender acquired the lock after the servers came back", run)
		}
		gap := cs.longestGap(start, end)
		gaps = append(gaps, gap)
		fault := "paused"
		if kill {
			fault = "killed"
		}
		t.Logf("fault %d (%s, %s %s): longest time without an acquisition %v", run, fault, down[0].Addr, down[1].Addr, gap.Round(time.Millisecond))
		if gap >= 2*contendedTTL {
			t.Errorf("fault %d (2 of 5 servers %s for %v): %v without an acquisition; want less than 2 × the lease of %v", run, fault, stopFor, gap.Round(time.Millisecond), contendedTTL)
		}
		// The next fault starts once the leases of holds that calls
		// waiting in a paused server's socket may have left have ended.
		if !cs.acquiredAfter(faultCtx(t), end.Add(contendedTTL)) {
			t.Fatalf("fault %d: no contender acquired the lock a lease after the servers came back", run)
		}
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	t.Logf("%d acquisitions; longest gaps %v", len(cs.acquired), gaps)
	for _, e := range cs.errs {
		// A call cut off by the fault fails, and its lease ends.
		t.Logf("contender: %s", e)
	}
}
