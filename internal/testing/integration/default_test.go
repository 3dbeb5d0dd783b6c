package integration_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dlockhq/dlock"
	_ "github.com/dlockhq/dlock/sqldlock/sqlite"
)

// TestOpenDefault checks that OpenDefault opens the store the CLI uses
// without --url: DLOCK_URL when set, else the SQLite file in the state
// directory, whose directory it creates.
func TestOpenDefault(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	t.Setenv("DLOCK_URL", "")
	c, err := dlock.OpenDefault(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryLock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(state, "dlock", "dlock.db")
	if p, err := dlock.DefaultStorePath(); err != nil || p != want {
		t.Errorf("DefaultStorePath = %q, %v; want %q", p, err, want)
	}
	if _, err := os.Stat(want); err != nil {
		t.Errorf("the default store's file: %v", err)
	}
	// A second Client on the default store sees the first one's lock.
	c2, err := dlock.OpenDefault(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.TryLock(t.Context(), "k"); err == nil {
		t.Error("a second Client on the default store acquired a held lock")
	}
	l.Release(t.Context())
	c2.Close()
	c.Close()

	t.Setenv("DLOCK_URL", "mem://open-default")
	c3, err := dlock.OpenDefault(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if _, ok := c3.Driver().(interface{ Count(string) int }); !ok {
		t.Errorf("with DLOCK_URL=mem://..., OpenDefault opened %T; want the in-process store", c3.Driver())
	}
}
