//go:build unix

package job_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/job"
)

// childEnv makes the test binary an instance that fires a job once: its
// value is the store's URL.
const childEnv = "DLOCK_JOB_TEST_INSTANCE"

// child opens the store at url, prints "ready", waits for a line on stdin
// (the firing), runs the job "report" with AtLeast(time.Minute) and prints
// "ran" or "skipped".
func child(url string) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := dlock.Open(ctx, url)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	defer c.Close()
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	err = job.Run(ctx, c, "report", func(context.Context) error {
		fmt.Println("ran")
		return nil
	}, job.AtLeast(time.Minute))
	switch {
	case errors.Is(err, job.ErrSkipped):
		fmt.Println("skipped")
	case err != nil:
		fmt.Println("error:", err)
		return 1
	}
	return 0
}

// Processes that fire the same job run it once: those that fire with the
// one that runs it find the lock held, and AtLeast keeps it past the run for
// one that fires a little later.
func TestOnceAcrossProcesses(t *testing.T) {
	const n = 4
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	url := testsrv.Get(t, testsrv.Redis).URL + "?prefix=" + testsrv.DatabaseName(t.Name()) + ":"
	ctx := testCtx(t)
	type instance struct {
		cmd   *exec.Cmd
		fire  *os.File
		lines *bufio.Scanner
	}
	instances := make([]instance, n)
	for i := range instances {
		cmd := exec.CommandContext(ctx, self)
		cmd.Env = append(os.Environ(), childEnv+"="+url)
		cmd.Stderr = os.Stderr
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
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		instances[i] = instance{cmd, stdin.(*os.File), bufio.NewScanner(stdout)}
	}
	for i, in := range instances {
		if !in.lines.Scan() || in.lines.Text() != "ready" {
			t.Fatalf("instance %d: %q, %v; want ready", i, in.lines.Text(), in.lines.Err())
		}
	}
	// All but the last fire at once; the last fires once they are done,
	// as a host whose clock is late would.
	for _, in := range instances[:n-1] {
		in.fire.WriteString("fire\n")
	}
	outcomes := map[string]int{}
	for i, in := range instances {
		if i == n-1 {
			in.fire.WriteString("fire\n")
		}
		var out []string
		for in.lines.Scan() {
			out = append(out, in.lines.Text())
		}
		if err := in.cmd.Wait(); err != nil {
			t.Errorf("instance %d: %v (output %q)", i, err, out)
		}
		outcomes[strings.Join(out, ",")]++
	}
	if outcomes["ran"] != 1 || outcomes["skipped"] != n-1 || len(outcomes) != 2 {
		t.Errorf("outcomes %v; want ran once and skipped %d times", outcomes, n-1)
	}
}
