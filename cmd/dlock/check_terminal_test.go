//go:build linux

package main_test

import (
	"strings"
	"testing"
)

// TestCheckProgressOnTerminal checks that dlock check draws its progress
// line on a terminal and erases it before the report.
func TestCheckProgressOnTerminal(t *testing.T) {
	e := newEnv(t, sqliteStore)
	p := e.startTTY("check", "--faults", "none", "--workers", "2", "--duration", "1500ms", "--ttl", "1s")
	p.expect("acquisitions")
	if code := p.wait(); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	out := p.out.String()
	last := strings.LastIndex(out, "\r\x1b[K")
	if !strings.Contains(out, "dlock check: ") || last < 0 || !strings.Contains(out[last:], "PASS: ") || strings.Contains(out[last:], "dlock check: ") {
		t.Errorf("terminal output %q: want progress lines, erased before the report", out)
	}
}
