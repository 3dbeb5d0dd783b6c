package sqldlock

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestDialectDependencies checks that each dialect's package compiles in its
// own database/sql driver and no other dialect's, and that package sqldlock
// itself compiles in none: a program that uses PostgreSQL does not build
// SQLite, and one that uses SQLite does not build pgx.
func TestDialectDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	const (
		pgx    = "github.com/jackc/pgx/v5"
		mysql  = "github.com/go-sql-driver/mysql"
		sqlite = "modernc.org/sqlite"
	)
	const mod = "github.com/dlockhq/dlock/sqldlock"
	for _, tc := range []struct {
		pkg  string
		want []string // module paths that must be among the dependencies
	}{
		{mod, nil},
		{mod + "/postgres", []string{pgx}},
		{mod + "/mysql", []string{mysql}},
		{mod + "/sqlite", []string{sqlite}},
	} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", tc.pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", tc.pkg, err, out)
		}
		mods := strings.Fields(string(out))
		for _, m := range []string{pgx, mysql, sqlite} {
			if got, want := slices.Contains(mods, m), slices.Contains(tc.want, m); got != want {
				t.Errorf("%s depends on %s: %v; want %v", tc.pkg, m, got, want)
			}
		}
	}
}
