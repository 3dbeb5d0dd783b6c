package sqldlock

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var dialects = []Dialect{SQLite, Postgres, MySQL}

// TestSchemaFiles checks that each dialect's schema file renders, with
// every name quoted, into statements without their terminators, one per
// "-- name:" line, and that it records the schema version.
func TestSchemaFiles(t *testing.T) {
	for _, d := range dialects {
		n := newNames(d, DefaultTable)
		script := schemaScript(d, n)
		stmts := ddl(d, n)
		if got, want := len(stmts), strings.Count(script, "\n-- name: "); got != want || got < 3 {
			t.Errorf("%s: %d statements for %d names", d, got, want)
		}
		for _, q := range stmts {
			if strings.HasSuffix(q, ";") || strings.HasSuffix(q, "//") || strings.Contains(q, "DELIMITER") {
				t.Errorf("%s: a statement keeps its terminator or a DELIMITER line:\n%s", d, q)
			}
		}
		if strings.Contains(script, "{{") {
			t.Errorf("%s: the script has a name that is not rendered:\n%s", d, script)
		}
		for _, m := range regexp.MustCompile(`(.)`+DefaultTable).FindAllStringSubmatch(script, -1) {
			if m[1] != d.Quote("")[:1] && m[1] != "'" {
				t.Errorf("%s: a name is not quoted: %s", d, m[0])
			}
		}
		if !strings.Contains(script, "dlock schema "+strconv.Itoa(schemaVersion)) {
			t.Errorf("%s: the script does not record schema version %d", d, schemaVersion)
		}
	}
}
