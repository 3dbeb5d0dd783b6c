package sqldlock

import (
	"strings"
	"testing"
)

// TestStmtFiles checks that each dialect's statements file renders, fair or
// not, into its driver's struct: an entry for every field, a field for
// every entry, every name filled in; and that a field without an entry and
// an entry without a field are errors.
func TestStmtFiles(t *testing.T) {
	for _, d := range dialects {
		for _, fair := range []bool{false, true} {
			dst := map[Dialect]any{Postgres: new(pgStmts), MySQL: new(myStmts), SQLite: new(liteStmts)}[d]
			data := stmtData{newNames(d, DefaultTable), fair}
			if err := loadStmts(d, data, dst); err != nil {
				t.Fatalf("%s (fair %v): %v", d, fair, err)
			}
			_, stmts := fileEntries(render(d.String()+"_stmts.sql", data))
			for _, q := range stmts {
				if strings.Contains(q, "{{") || strings.Contains(q, "-- name:") || strings.HasSuffix(q, ";") {
					t.Errorf("%s: a statement is not rendered or not cut off:\n%s", d, q)
				}
			}
		}
		extra := map[Dialect]any{
			Postgres: &struct {
				pgStmts
				Unused string
			}{},
			MySQL: &struct {
				myStmts
				Unused string
			}{},
			SQLite: &struct {
				liteStmts
				Unused string
			}{},
		}[d]
		if err := loadStmts(d, stmtData{names: newNames(d, DefaultTable)}, extra); err == nil || !strings.Contains(err.Error(), "no entry for") {
			t.Errorf("%s: a field without an entry: err = %v", d, err)
		}
		var few struct{ Count string }
		if err := loadStmts(d, stmtData{names: newNames(d, DefaultTable)}, &few); err == nil || !strings.Contains(err.Error(), "has no field") {
			t.Errorf("%s: entries without a field: err = %v", d, err)
		}
	}
}
