package sqldlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"

	"github.com/dlockhq/dlock"
)

// ErrNoneFree reports that Claim.One found no free row.
var ErrNoneFree = errors.New("sqldlock: no free row to claim")

// Claim hands out the free rows of a resource table (tasks, ID ranges,
// coupons, machines) so that no two workers ever get the same row: the
// "resource table" design, where a row's state column goes from Free to
// Taken. ID is the Go type of the IDColumn (int64, string, ...).
//
// One is portable and needs no lock: it reads up to Candidates free rows
//
//	SELECT id FROM t WHERE state = ? LIMIT ?
//
// and tries them in random order (so that concurrent workers, who read the
// same candidates, rarely pick the same one) with a compare-and-set
//
//	UPDATE t SET state = ? WHERE id = ? AND state = ?
//
// until one changes exactly one row: that row is the caller's, since the
// update of a row whose state is no longer Free matches nothing. If every
// candidate was taken by others, it reads new candidates, for at most Rounds
// rounds. (On PostgreSQL and MySQL 8, SELECT ... FOR UPDATE SKIP LOCKED in a
// transaction is an alternative that needs no retries.)
//
// A nil Free matches rows whose state is NULL; a nil Taken sets NULL. To
// record who took a row, use a column such as assigned_to with Free nil and
// Taken the worker's name. Identifiers must be plain
// ([A-Za-z_][A-Za-z0-9_]*) and are quoted for Dialect; IDColumn must be a
// unique key.
type Claim[ID any] struct {
	Table       string
	IDColumn    string
	StateColumn string
	Free, Taken any
	Dialect     Dialect
	// Candidates is how many free rows each round reads; zero means 16.
	Candidates int
	// Rounds bounds the rounds of reading candidates; zero means 4.
	Rounds int
}

// One claims one free row and returns its id. It returns an error wrapping
// ErrNoneFree if no row is free, and one wrapping ErrConflict if other
// workers took every candidate it read, in every round (rows may still be
// free: call One again). Bad identifiers are reported with a
// *dlock.ArgError naming them.
func (c Claim[ID]) One(ctx context.Context, db Querier) (ID, error) {
	var zero ID
	if err := c.check(); err != nil {
		return zero, err
	}
	d := c.Dialect
	t, idc, st := d.Quote(c.Table), d.Quote(c.IDColumn), d.Quote(c.StateColumn)
	isFree, freeArgs := st+" = "+d.Placeholder(1), []any{c.Free}
	if c.Free == nil {
		isFree, freeArgs = st+" IS NULL", nil
	}
	selectQ := "SELECT " + idc + " FROM " + t + " WHERE " + isFree + " LIMIT " + d.Placeholder(len(freeArgs)+1)
	// UPDATE t SET state = $1 WHERE id = $2 AND <state is free ($3)>
	updateQ := "UPDATE " + t + " SET " + st + " = " + d.Placeholder(1) + " WHERE " + idc + " = " + d.Placeholder(2) + " AND "
	if c.Free == nil {
		updateQ += st + " IS NULL"
	} else {
		updateQ += st + " = " + d.Placeholder(3)
	}
	candidates, rounds := c.Candidates, c.Rounds
	if candidates <= 0 {
		candidates = 16
	}
	if rounds <= 0 {
		rounds = 4
	}
	for range rounds {
		ids, err := c.candidates(ctx, db, selectQ, append(slices.Clip(freeArgs), candidates))
		if err != nil {
			return zero, err
		}
		if len(ids) == 0 {
			return zero, fmt.Errorf("sqldlock: claim from %s: %w", c.Table, ErrNoneFree)
		}
		rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		for _, id := range ids {
			args := []any{c.Taken, id}
			if c.Free != nil {
				args = append(args, c.Free)
			}
			res, err := db.ExecContext(ctx, updateQ, args...)
			if err != nil {
				return zero, fmt.Errorf("sqldlock: claim from %s: %w", c.Table, err)
			}
			n, err := res.RowsAffected()
			switch {
			case err != nil:
				return zero, fmt.Errorf("sqldlock: claim from %s: %w", c.Table, err)
			case n == 1:
				return id, nil
			case n > 1:
				return zero, fmt.Errorf("sqldlock: claim from %s: %d rows have %s=%v: it must be a unique key", c.Table, n, c.IDColumn, id)
			}
			// Someone else took it first: try the next candidate.
		}
	}
	return zero, fmt.Errorf("sqldlock: claim from %s: other workers took every candidate in %d rounds: %w", c.Table, rounds, ErrConflict)
}

func (c Claim[ID]) candidates(ctx context.Context, db Querier, q string, args []any) ([]ID, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqldlock: claim from %s: %w", c.Table, err)
	}
	defer rows.Close()
	var ids []ID
	for rows.Next() {
		var id ID
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("sqldlock: claim from %s: %w", c.Table, err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqldlock: claim from %s: %w", c.Table, err)
	}
	return ids, nil
}

func (c Claim[ID]) check() error {
	if err := c.Dialect.Check(); err != nil {
		return err
	}
	for _, f := range []struct{ name, value string }{
		{"Claim.Table", c.Table},
		{"Claim.IDColumn", c.IDColumn},
		{"Claim.StateColumn", c.StateColumn},
	} {
		if err := checkIdent(f.name, f.value, maxIdentLen); err != nil {
			return err
		}
	}
	if reflect.DeepEqual(c.Free, c.Taken) {
		return &dlock.ArgError{Name: "Claim.Taken", Value: c.Taken, Reason: "equals Claim.Free"}
	}
	return nil
}
