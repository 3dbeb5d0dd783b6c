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
)

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
