package leader_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/leader"
)

// The test binary runs as a campaigner of its own when these are set.
const (
	childURL = "LEADER_TEST_CHILD_URL"
	childKey = "LEADER_TEST_CHILD_KEY"
	childTTL = "LEADER_TEST_CHILD_TTL"
)

// runChild campaigns as "child" if the process was started as a child by
// TestPausedLeader, prints "term N", waits for the term to end, prints
// "ended: CAUSE" and reports true.
func runChild() bool {
	url := os.Getenv(childURL)
	if url == "" {
		return false
	}
	ttl, err := time.ParseDuration(os.Getenv(childTTL))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	ctx := context.Background()
	c, err := dlock.Open(ctx, url)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	defer c.Close()
	term, err := leader.Campaign(ctx, c, os.Getenv(childKey), "child", leader.WithTTL(ttl))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("term", term.Number())
	<-term.Done()
	fmt.Println("ended:", context.Cause(term.Context()))
	return true
}

// TestPausedLeader stops a leader's process (SIGSTOP) past its lease: the
// observer sees the next leader, with a greater term number, and once the
// old leader runs again its term ends with ErrLost.
func TestPausedLeader(t *testing.T) {
	for _, b := range backends {
		switch b.name {
		case "mem": // one process only
			continue
		case "sqlite":
			// A process stopped inside a write transaction (its
			// renewal) keeps the file's write lock: no other process
			// can write until it resumes (see sqldlock's "SQLite and
			// several processes"), so the takeover this test waits
			// for cannot happen when the stop lands there.
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx, url, key := dlocktest.Ctx(t), b.url(t), dlocktest.Key(t, "leader")
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childURL+"="+url, childKey+"="+key, childTTL+"="+b.ttl.String())
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			resumed := false
			defer func() {
				if !resumed {
					cmd.Process.Signal(syscall.SIGCONT)
				}
				cmd.Process.Kill()
				cmd.Wait()
			}()
			lines := bufio.NewScanner(out)
			line := func() string {
				if !lines.Scan() {
					t.Fatalf("child: no more output: %v", lines.Err())
				}
				return lines.Text()
			}
			first := line()
			n, err := strconv.ParseUint(strings.TrimPrefix(first, "term "), 10, 64)
			if err != nil {
				t.Fatalf("child: %q", first)
			}

			c := open(t, url)
			ch := observe(t, c, key)
			await(t, ch, "the child leading", func(l leader.Leader) bool { return l.Value == "child" && l.Term == n })
			if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}

			// Waits until the child's lease (or session) has run out.
			term, err := leader.Campaign(ctx, c, key, "parent")
			if err != nil {
				t.Fatal(err)
			}
			defer term.Resign(ctx)
			if term.Number() <= n {
				t.Errorf("the next term %d is not after the paused leader's %d", term.Number(), n)
			}
			await(t, ch, "the next leader", func(l leader.Leader) bool { return l.Value == "parent" && l.Term == term.Number() })

			resumed = true
			if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			if end := line(); !strings.HasPrefix(end, "ended: ") || !strings.Contains(end, dlock.ErrLost.Error()) {
				t.Errorf("child, resumed: %q; want its term ended by a loss", end)
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("child: %v", err)
			}
			if l, err := leader.Current(ctx, c, key); err != nil || l.Term != term.Number() {
				t.Errorf("Current after the child resumed = %+v, %v; want the parent's term", l, err)
			}
		})
	}
}
