package sqldlock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/dlockhq/dlock"
)

var (
	_ Querier = (*sql.DB)(nil)
	_ Querier = (*sql.Tx)(nil)
	_ Querier = (*sql.Conn)(nil)
)

func TestHelperIdentifiers(t *testing.T) {
	v := Versioned{Table: "accounts", IDColumn: "id", VersionColumn: "version", Dialect: SQLite}
	c := Claim[int64]{Table: "tasks", IDColumn: "id", StateColumn: "state", Free: 1, Taken: 2, Dialect: SQLite}
	var db *sql.DB // never reached
	for _, tc := range []struct {
		err         error
		name, value string
	}{
		{func() error {
			w := v
			w.Table = "acc-ounts"
			_, err := w.Update(context.Background(), db, 1, 1, nil)
			return err
		}(), "Versioned.Table", "acc-ounts"},
		{func() error {
			w := v
			w.IDColumn = "1id"
			_, err := w.Update(context.Background(), db, 1, 1, nil)
			return err
		}(), "Versioned.IDColumn", "1id"},
		{func() error {
			w := v
			w.VersionColumn = ""
			_, err := w.Update(context.Background(), db, 1, 1, nil)
			return err
		}(), "Versioned.VersionColumn", ""},
		{func() error { _, err := v.Update(context.Background(), db, 1, 1, map[string]any{"a;b": 1}); return err }(), "set column", "a;b"},
		{func() error {
			_, err := v.Update(context.Background(), db, 1, 1, map[string]any{"version": 7})
			return err
		}(), "set column", "version"},
		{func() error { d := c; d.Table = `t"x`; _, err := d.One(context.Background(), db); return err }(), "Claim.Table", `t"x`},
		{func() error { d := c; d.StateColumn = "st ate"; _, err := d.One(context.Background(), db); return err }(), "Claim.StateColumn", "st ate"},
		{func() error { d := c; d.Taken = 1; _, err := d.One(context.Background(), db); return err }(), "Claim.Taken", "1"},
		{func() error { d := c; d.Dialect = 0; _, err := d.One(context.Background(), db); return err }(), "dialect", "Dialect(0)"},
	} {
		var ae *dlock.ArgError
		if !errors.As(tc.err, &ae) || ae.Name != tc.name || fmt.Sprint(ae.Value) != tc.value || !errors.Is(tc.err, dlock.ErrInvalidArgument) {
			t.Errorf("err = %v; want an ArgError naming %s=%q", tc.err, tc.name, tc.value)
		}
	}
}
