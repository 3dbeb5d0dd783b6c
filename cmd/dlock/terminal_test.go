//go:build linux

package main_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// stuckTimeout bounds the wait for a dlock that a bug would leave waiting
// forever: the test then kills it and fails.
const stuckTimeout = 30 * time.Second

// ttyProc is a dlock process whose standard streams and controlling
// terminal are a pseudo-terminal, as when it runs from an interactive shell
// (but with no job control: it leads a session of its own).
type ttyProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	ptm    *os.File      // the terminal's master side
	output chan []byte   // what dlock and its command write on the terminal
	closed chan struct{} // closed when the terminal's output has ended
	out    bytes.Buffer  // output read so far
}

func (e *env) startTTY(args ...string) *ttyProc {
	e.t.Helper()
	return e.startTTYCommand(dlockBin, args...)
}

// startTTYCommand starts the program name (dlock or a shell) on a
// pseudo-terminal, with dlock's environment.
func (e *env) startTTYCommand(name string, args ...string) *ttyProc {
	e.t.Helper()
	ptm, pts, err := pty.Open()
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), processTimeout)
	cmd := e.command(ctx, args...)
	if name != dlockBin {
		cmd = exec.CommandContext(ctx, name, args...)
		cmd.Env = e.command(ctx).Env
	}
	p := &ttyProc{t: e.t, cmd: cmd, ptm: ptm, output: make(chan []byte, 64), closed: make(chan struct{})}
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = pts, pts, pts
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err = p.cmd.Start()
	pts.Close()
	if err != nil {
		ptm.Close()
		cancel()
		e.t.Fatal(err)
	}
	go func() {
		defer close(p.closed)
		for {
			b := make([]byte, 1024)
			n, err := ptm.Read(b)
			if n > 0 {
				p.output <- b[:n]
			}
			if err != nil { // EIO once every process closed the terminal
				return
			}
		}
	}()
	e.t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
		ptm.Close()
		select {
		case <-p.closed:
		case <-time.After(10 * time.Second):
			e.t.Error("the terminal's output did not end")
		}
		cancel()
	})
	return p
}

// expect reads the terminal's output until it contains s.
func (p *ttyProc) expect(s string) {
	p.t.Helper()
	timeout := time.After(stuckTimeout)
	for !strings.Contains(p.out.String(), s) {
		select {
		case b := <-p.output:
			p.out.Write(b)
		case <-timeout:
			p.t.Fatalf("no %q on the terminal after %v; output: %q", s, stuckTimeout, p.out.String())
		}
	}
}

// wait waits for dlock to exit, killing it if it is stuck, and returns its
// status.
func (p *ttyProc) wait() int {
	p.t.Helper()
	stuck := time.AfterFunc(stuckTimeout, func() { p.cmd.Process.Kill() })
	defer stuck.Stop()
	err := p.cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		p.t.Fatal(err)
	}
	// What dlock wrote last may still be in the terminal's buffer: read
	// until the terminal reports that every process closed it (the reader
	// sees EIO), unless a process it started keeps it open.
	drained := time.After(stuckTimeout)
read:
	for {
		select {
		case b := <-p.output:
			p.out.Write(b)
		case <-p.closed:
			break read
		case <-drained:
			break read
		}
	}
	for len(p.output) > 0 {
		p.out.Write(<-p.output)
	}
	p.t.Logf("dlock %q: exit %d; terminal: %q", p.cmd.Args[1:], p.cmd.ProcessState.ExitCode(), p.out.String())
	return p.cmd.ProcessState.ExitCode()
}

// TestTerminalForeground runs a command that reads a line from the
// terminal, as an editor does: dlock must give it the terminal's foreground
// (else the kernel stops it with SIGTTIN and dlock waits forever, lock held),
// and take it back when it exits.
func TestTerminalForeground(t *testing.T) {
	e := newEnv(t, sqliteStore)
	p := e.startTTY("run", "--key", "tty", "--", "sh", "-c", `echo ready; read line; echo "got:$line"`)
	p.expect("ready")
	if _, err := p.ptm.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(); code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
	if !strings.Contains(p.out.String(), "got:hello") {
		t.Errorf("the command did not read the line: terminal output %q", p.out.String())
	}
	if r := e.run("run", "--key", "tty", "--wait", "0", "--", "true"); r.code != 0 {
		t.Errorf("the lock was not released: exit status %d", r.code)
	}
}

// TestTerminalStoppedCommand stops the command that has the terminal: with
// no job control to hand the stop to, dlock takes the terminal back so that
// ^C reaches it, and forwards the SIGINT (and a SIGCONT) to the stopped
// command, which dies of it.
func TestTerminalStoppedCommand(t *testing.T) {
	e := newEnv(t, sqliteStore)
	p := e.startTTY("run", "--key", "tty", "--", "sh", "-c", `echo "started $$"; kill -STOP $$; echo resumed; exit 3`)
	p.expect("started ")
	pgid := 0
	for _, l := range strings.Split(p.out.String(), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "started" {
			pgid, _ = strconv.Atoi(f[1])
		}
	}
	if pgid == 0 {
		t.Fatalf("no pid in %q", p.out.String())
	}
	waitStopped(t, pgid)
	p.expect("was stopped")                           // dlock says so, and has taken the terminal back
	if _, err := p.ptm.Write([]byte{3}); err != nil { // ^C
		t.Fatal(err)
	}
	if code := p.wait(); code != 128+int(syscall.SIGINT) {
		t.Errorf("exit status %d, want %d (the command killed by SIGINT)", code, 128+int(syscall.SIGINT))
	}
	if r := e.run("run", "--key", "tty", "--wait", "0", "--", "true"); r.code != 0 {
		t.Errorf("the lock was not released: exit status %d", r.code)
	}
}

// waitStopped waits until the process pid is stopped: nothing signals it,
// so this polls its state.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(stuckTimeout)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		// pid (comm) state ...: comm may contain anything but ')'.
		if i := bytes.LastIndexByte(b, ')'); i > 0 && len(b) > i+2 && b[i+2] == 'T' {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not stop: %s", pid, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSignalReachesStoppedCommand sends SIGTERM to a dlock whose command has
// stopped itself: the forwarded SIGTERM must reach it (dlock sends SIGCONT
// too), dlock exits with its status and releases the lock.
func TestSignalReachesStoppedCommand(t *testing.T) {
	e := newEnv(t, sqliteStore)
	p := e.start("run", "--key", "stopped", "--", "sh", "-c", `echo "started $DLOCK_TOKEN $$"; kill -STOP $$; echo resumed; exit 3`)
	p.started()
	waitStopped(t, p.pgid)
	p.signal(syscall.SIGTERM)
	stuck := time.AfterFunc(stuckTimeout, func() { syscall.Kill(-p.pgid, syscall.SIGKILL) })
	code, stderr := p.wait()
	stuck.Stop()
	if code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit status %d, want %d (the command killed by the forwarded SIGTERM)", code, 128+int(syscall.SIGTERM))
	}
	if strings.Contains(stderr, "resumed") {
		t.Errorf("the command resumed before SIGTERM: %q", stderr)
	}
	if r := e.run("run", "--key", "stopped", "--wait", "0", "--", "true"); r.code != 0 {
		t.Errorf("the lock was not released: exit status %d", r.code)
	}
}
