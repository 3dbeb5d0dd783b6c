package sqldlock_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
)

// Child processes of TestSQLiteProcesses run childMain (see TestMain).
const childEnv = "SQLDLOCK_TEST_CHILD"

// childMain takes the lock DLOCK_KEY of the SQLite database DLOCK_URL
// DLOCK_ROUNDS times and, while holding it, appends "enter PID TOKEN" and
// "exit PID TOKEN" lines to the file DLOCK_LOG.
func childMain() int {
	rounds, _ := strconv.Atoi(os.Getenv("DLOCK_ROUNDS"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := dlock.Open(ctx, os.Getenv("DLOCK_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer c.Close()
	log, err := os.OpenFile(os.Getenv("DLOCK_LOG"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer log.Close()
	pid := os.Getpid()
	for range rounds {
		l, err := c.Lock(ctx, os.Getenv("DLOCK_KEY"), dlock.WithTTL(30*time.Second), dlock.WithBackoff(time.Millisecond, 10*time.Millisecond))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintf(log, "enter %d %d\n", pid, l.Token())
		time.Sleep(time.Millisecond)
		fmt.Fprintf(log, "exit %d %d\n", pid, l.Token())
		if err := l.Release(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// TestSQLiteProcesses runs several OS processes contending for one lock in
// one SQLite file, and checks from their shared log that they never held it
// at once and that tokens increased.
func TestSQLiteProcesses(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "locks.db")
	logPath := filepath.Join(dir, "log")
	const procs, rounds = 3, 25
	var cmds []*exec.Cmd
	for range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1",
			"DLOCK_URL=sqlite://"+db, "DLOCK_KEY=shared", "DLOCK_LOG="+logPath,
			"DLOCK_ROUNDS="+strconv.Itoa(rounds))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("child: %v", err)
		}
	}
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		lines     int
		inside    string
		lastToken uint64
		pids      = map[string]int{}
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines++
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			t.Fatalf("bad log line %q", sc.Text())
		}
		who := fields[1] + " " + fields[2]
		tok, _ := strconv.ParseUint(fields[2], 10, 64)
		switch fields[0] {
		case "enter":
			if inside != "" {
				t.Fatalf("line %d: %s entered while %s was inside", lines, who, inside)
			}
			if tok <= lastToken {
				t.Errorf("line %d: token %d after %d", lines, tok, lastToken)
			}
			inside, lastToken = who, tok
			pids[fields[1]]++
		case "exit":
			if inside != who {
				t.Fatalf("line %d: %s exited while %q was inside", lines, who, inside)
			}
			inside = ""
		}
	}
	if lines != 2*procs*rounds {
		t.Errorf("%d log lines; want %d", lines, 2*procs*rounds)
	}
	if len(pids) != procs {
		t.Errorf("%d processes held the lock; want %d", len(pids), procs)
	}
}
