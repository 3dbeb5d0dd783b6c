//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package check

import (
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The workers and the parent time events on CLOCK_MONOTONIC, which every
// process on the host shares, so that the parent can order one worker's
// release before another's acquisition.
var monoBase = func() (b struct {
	t    time.Time
	mono int64
}) {
	b.t = time.Now()
	b.mono = monoNow()
	return b
}()

// monoNow reads CLOCK_MONOTONIC in nanoseconds.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}

// mono converts t, which must carry Go's monotonic reading (time.Now and
// dlock.Lock.ValidUntil do), to CLOCK_MONOTONIC nanoseconds.
func mono(t time.Time) int64 { return monoBase.mono + int64(t.Sub(monoBase.t)) }

// Signals the faults send.
var (
	sigStop os.Signal = syscall.SIGSTOP
	sigCont os.Signal = syscall.SIGCONT
)

// supported reports whether the check can run here.
func supported() error { return nil }

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), ioctlGetTermios)
	return err == nil
}

// workerAttr makes a worker a process group of its own (a ^C to the check
// reaches the parent, which stops its workers itself) that dies with its
// parent where the system can say so.
func workerAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	deathSignal(cmd.SysProcAttr)
}
