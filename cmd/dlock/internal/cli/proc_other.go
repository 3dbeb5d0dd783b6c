//go:build !unix

package cli

import (
	"os"
	"syscall"
)

var forwardedSignals = []os.Signal{os.Interrupt}

var (
	sigTerm os.Signal = os.Kill
	sigKill os.Signal = os.Kill
	sigCont os.Signal // none: signalGroup is never called with it
)

// childSignals is empty: no signal tells of a change in the command's state.
var childSignals []os.Signal

// terminal is never used here: there are no process groups to hand it to.
type terminal struct{}

func foregroundTerminal(stdin any) *terminal    { return nil }
func (t *terminal) attach(*syscall.SysProcAttr) {}
func (t *terminal) give(pgid int) error         { return nil }
func (t *terminal) reclaim() error              { return nil }
func (t *terminal) ours() bool                  { return false }
func nextChildEvent(pid int) childEvent         { return childNone }

func sysProcAttr() *syscall.SysProcAttr { return nil }

// signalGroup kills the process: there are no process groups to signal here.
func signalGroup(pid int, sig os.Signal) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

func exitStatus(ps *os.ProcessState) int { return ps.ExitCode() }

func signalStatus(os.Signal) int { return ExitSignalBase + 2 }

func signalName(sig os.Signal) string { return sig.String() }
