package sqldlock

import (
	"context"
	"database/sql"

	"github.com/dlockhq/dlock/driver"
)

// The stored procedures of MySQL/MariaDB (sql/mysql.sql):
// NAME_acquire_multi, NAME_refresh_multi and NAME_release_multi run the
// transactions of acquire, of a Shared or Semaphore refresh and of a
// release that leaves a marker behind, each in one CALL, so that the key's
// rows, and the token counter, stay locked only while the server runs it:
// however slow or paused the client, no other owner's renewal or
// acquisition waits for it. They do what multiSQL's steps do (with
// multiSQL's statements, bound to the procedures' parameters) and what the
// PostgreSQL functions of the same names do.

// call runs a CALL of a procedure and scans its result row into dest. A
// CALL that the server rolled back as a deadlock victim had no effect: it
// runs again, three times in all.
func (o myOps) call(ctx context.Context, db *sql.DB, query string, args []any, dest ...any) error {
	for attempt := 1; ; attempt++ {
		err := db.QueryRowContext(ctx, query, args...).Scan(dest...)
		if err == nil || attempt == 3 || ctx.Err() != nil || !myRolledBack(err) {
			return err
		}
	}
}

// acquireProcCall runs NAME_acquire_multi.
func (o myOps) acquireProcCall(ctx context.Context, db *sql.DB, req driver.Request, ttl int64) (driver.Result, error) {
	var out multiOut
	err := db.QueryRowContext(ctx, o.q.AcquireMulti, req.Key, req.Owner, req.Info, ttl, int(req.Mode), req.Limit, req.Queue, o.fair).
		Scan(&out.state, &out.token, &out.retry, &out.mode, &out.limit)
	if err != nil {
		return driver.Result{}, err
	}
	return out.result(req)
}

// refreshProcCall runs NAME_refresh_multi.
func (o myOps) refreshProcCall(ctx context.Context, db *sql.DB, req driver.Request, ttl int64) (bool, error) {
	var ok bool
	err := o.call(ctx, db, o.q.RefreshMulti, []any{req.Key, req.Owner, ttl}, &ok)
	return ok, err
}

// releaseProcCall runs NAME_release_multi.
func (o myOps) releaseProcCall(ctx context.Context, db *sql.DB, req driver.Request, main bool) (found, live bool, err error) {
	err = o.call(ctx, db, o.q.ReleaseMulti, []any{req.Key, req.Owner, main}, &found, &live)
	return found, live && found, err
}
