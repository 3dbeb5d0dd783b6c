//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package check

import (
	"errors"
	"os"
	"os/exec"
	"time"
)

// supported reports whether the check can run here: it needs a monotonic
// clock shared by processes and job-control signals.
func supported() error {
	return errors.New("dlock check runs on Linux, macOS and the BSDs only")
}

var start = time.Now()

func monoNow() int64 { return int64(time.Since(start)) }

func mono(t time.Time) int64 { return int64(t.Sub(start)) }

var sigStop, sigCont os.Signal = os.Kill, os.Kill

func isTerminal(*os.File) bool { return false }

func workerAttr(*exec.Cmd) {}
