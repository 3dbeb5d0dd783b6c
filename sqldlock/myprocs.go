package sqldlock

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// The stored procedures of schema version 6 on MySQL/MariaDB:
// NAME_acq_multi_v1, NAME_ref_multi_v1 and NAME_rel_multi_v1 run the
// transactions of acquire, of a Shared or Semaphore refresh and of a
// release that leaves a marker behind, each in one CALL, so that the key's
// rows, and the token counter, stay locked only while the server runs it:
// however slow or paused the client, no other owner's renewal or
// acquisition waits for it. They do what multiSQL's steps do (the
// statements are multiSQL's, bound to the procedures' parameters) and what
// the PostgreSQL functions of schema version 5 do.

func (o myOps) acqProc() string { return "`" + o.n.raw + "_acq_multi_v1`" }
func (o myOps) refProc() string { return "`" + o.n.raw + "_ref_multi_v1`" }
func (o myOps) relProc() string { return "`" + o.n.raw + "_rel_multi_v1`" }

// procNames are the names of the procedures, unquoted.
func (o myOps) procNames() []string {
	return []string{o.n.raw + "_acq_multi_v1", o.n.raw + "_ref_multi_v1", o.n.raw + "_rel_multi_v1"}
}

// bindParams replaces the ? placeholders of stmt, in order, with exprs
// (the procedures' parameters and variables). The statements of multiSQL
// have no ? but their placeholders.
func bindParams(stmt string, exprs ...string) string {
	if strings.Count(stmt, "?") != len(exprs) {
		panic("sqldlock: " + strconv.Itoa(len(exprs)) + " expressions for the placeholders of " + stmt)
	}
	var b strings.Builder
	for _, e := range exprs {
		i := strings.IndexByte(stmt, '?')
		b.WriteString(stmt[:i])
		b.WriteString(e)
		stmt = stmt[i+1:]
	}
	b.WriteString(stmt)
	return b.String()
}

// procTx is the frame of every procedure: its declarations, then a READ
// COMMITTED transaction around body (a block labelled body, which LEAVE
// body ends early), committed, then the statement whose row is the
// procedure's result. A failing statement rolls the transaction back and
// the CALL returns its error.
func procTx(name, params, decls, body, result string) string {
	return `CREATE PROCEDURE ` + name + `(` + params + `)
	MODIFIES SQL DATA
BEGIN
` + decls + `
	DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
	SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
	START TRANSACTION;
	body: BEGIN
` + body + `
	END body;
	COMMIT;
	` + result + `;
END`
}

// nextTokenProc draws a token into v_tok.
func (o myOps) nextTokenProc() string {
	return `UPDATE ` + o.n.seq + ` SET v = LAST_INSERT_ID(v + 1) WHERE id = 1;
		SET v_tok = LAST_INSERT_ID();`
}

// acquireProc is NAME_acq_multi_v1: the whole of acquire's transaction
// (multiSQL.acquireMulti, after lockKey and the sweep of the key's stale
// holds-table rows), for every mode. p_mode and p_lim are the request's
// mode (0 Exclusive, 1 Shared, 2 Semaphore) and limit; its result row is
// (state, token, retry in microseconds, mode, limit), state one of the
// multi* results.
func (o myOps) acquireProc() string {
	q := o.multi()
	t, h := o.n.table, o.n.holds
	now := myNow
	left := `TIMESTAMPDIFF(MICROSECOND, ` + now + `, expires_at)`
	touch := bindParams(q.touchHold, "p_ttl", "p_key", "p_owner") + `;`
	markRow := bindParams(q.markRow, "p_key", "p_key") + `;`
	queue := `IF p_queue THEN
			IF v_own_live THEN
				` + touch + `
			ELSE
				` + o.nextTokenProc() + `
				` + bindParams(q.upsertHold, "p_key", "p_owner", "1", "p_mode", "p_lim", "v_tok", "''", "p_ttl") + `;
			END IF;
		END IF;`
	decls := `	DECLARE v_now DATETIME(6);
	DECLARE v_main_owner VARBINARY(255) DEFAULT NULL;
	DECLARE v_main_token BIGINT;
	DECLARE v_main_live BOOLEAN;
	DECLARE v_main_left BIGINT;
	DECLARE v_main_found BOOLEAN DEFAULT FALSE;
	DECLARE v_own_waiting BOOLEAN DEFAULT NULL;
	DECLARE v_own_mode TINYINT;
	DECLARE v_own_lim INT;
	DECLARE v_own_token BIGINT;
	DECLARE v_own_live BOOLEAN DEFAULT FALSE;
	DECLARE v_gone BOOLEAN DEFAULT FALSE;
	DECLARE v_first_mode TINYINT DEFAULT NULL;
	DECLARE v_first_lim INT;
	DECLARE v_holders INT;
	DECLARE v_holders_excl BOOLEAN;
	DECLARE v_holders_left BIGINT;
	DECLARE v_ahead INT;
	DECLARE v_ahead_excl BOOLEAN;
	DECLARE v_admit BOOLEAN;
	DECLARE v_tok BIGINT;
	DECLARE o_state TINYINT DEFAULT 0;
	DECLARE o_token BIGINT DEFAULT NULL;
	DECLARE o_retry BIGINT DEFAULT NULL;
	DECLARE o_mode TINYINT DEFAULT NULL;
	DECLARE o_lim INT DEFAULT NULL;`
	body := `		` + bindParams(q.lockKey, "p_key") + `;
		DELETE FROM ` + h + ` WHERE lock_key = p_key AND expires_at <= ` + now + `
			AND (waiting = 0 OR expires_at <= ` + now + ` - INTERVAL ` + strconv.FormatInt(int64(goneFor/time.Second), 10) + ` SECOND);
		SET v_now = ` + now + `;
		SELECT owner, token, expires_at > v_now, ` + left + `
			INTO v_main_owner, v_main_token, v_main_live, v_main_left FROM ` + t + ` WHERE lock_key = p_key;
		SET v_main_found = v_main_owner IS NOT NULL;
		IF v_main_found AND NOT v_main_live THEN
			DELETE FROM ` + t + ` WHERE lock_key = p_key;
			DELETE FROM ` + h + ` WHERE lock_key = p_key AND waiting = 0;
			SET v_main_found = FALSE;
		END IF;
		SELECT waiting = 1, mode, lim, token, expires_at > v_now
			INTO v_own_waiting, v_own_mode, v_own_lim, v_own_token, v_own_live
			FROM ` + h + ` WHERE lock_key = p_key AND owner = p_owner;
		IF v_own_waiting IS NULL THEN
			SET v_own_live = FALSE;
		ELSE
			SET v_gone = NOT v_own_live AND v_own_waiting;
		END IF;
		IF v_main_found AND v_main_owner <> '' THEN
			IF v_main_owner = p_owner THEN
				IF p_mode = 1 THEN
					` + bindParams(q.downgrade, "p_ttl", "p_key") + `;
					` + bindParams(q.upsertHold, "p_key", "p_owner", "0", "1", "0", "v_main_token", "p_info", "p_ttl") + `;
					` + markRow + `
					SET o_state = 1, o_token = v_main_token;
					LEAVE body;
				ELSEIF p_mode = 2 THEN
					SET o_state = 3;
					LEAVE body;
				END IF;
				` + bindParams(q.setMain, "p_key", "p_owner", "v_main_token", "p_info", "p_ttl") + `;
				SET o_state = 1, o_token = v_main_token;
				LEAVE body;
			END IF;
			IF p_mode = 2 THEN
				SET o_state = 4;
				LEAVE body;
			END IF;
			IF v_gone AND p_queue THEN
				SET o_state = 2;
				LEAVE body;
			END IF;
			` + queue + `
			SET o_retry = GREATEST(v_main_left, 0);
			LEAVE body;
		END IF;
		IF v_own_live AND NOT v_own_waiting THEN
			IF v_own_mode <> p_mode OR p_mode = 2 AND v_own_lim <> p_lim THEN
				SET o_state = 5, o_mode = v_own_mode, o_lim = v_own_lim;
				LEAVE body;
			END IF;
			` + touch + `
			` + bindParams(q.upsertMarker, "p_key", "p_ttl") + `;
			SET o_state = 1, o_token = v_own_token;
			LEAVE body;
		END IF;
		SELECT COUNT(*), COALESCE(MAX(mode = 0), FALSE), MIN(TIMESTAMPDIFF(MICROSECOND, v_now, expires_at))
			INTO v_holders, v_holders_excl, v_holders_left FROM ` + h + `
			WHERE lock_key = p_key AND owner <> p_owner AND waiting = 0 AND expires_at > v_now;
		SELECT mode, lim INTO v_first_mode, v_first_lim FROM ` + h + `
			WHERE lock_key = p_key AND owner <> p_owner AND waiting = 0 AND expires_at > v_now
			ORDER BY token LIMIT 1;
		IF v_first_mode IS NULL THEN
			SELECT mode, lim INTO v_first_mode, v_first_lim FROM ` + h + `
				WHERE lock_key = p_key AND waiting = 1 AND expires_at > v_now
				AND (owner <> p_owner OR v_own_live)
				ORDER BY token LIMIT 1;
		END IF;
		IF v_first_mode IS NOT NULL AND ((p_mode = 2) <> (v_first_mode = 2) OR v_first_mode = 2 AND v_first_lim <> p_lim) THEN
			SET o_state = 6, o_mode = v_first_mode, o_lim = v_first_lim;
			LEAVE body;
		END IF;
		IF v_gone AND p_queue THEN
			SET o_state = 2;
			LEAVE body;
		END IF;
		SELECT COUNT(*), COALESCE(MAX(mode = 0), FALSE) INTO v_ahead, v_ahead_excl FROM ` + h + `
			WHERE lock_key = p_key AND owner <> p_owner AND waiting = 1 AND expires_at > v_now
			AND (NOT v_own_live OR token < v_own_token);
		IF p_mode = 0 THEN
			SET v_admit = v_holders = 0 AND (NOT p_fair OR v_ahead = 0);
		ELSEIF p_mode = 1 THEN
			SET v_admit = NOT v_holders_excl AND NOT v_ahead_excl;
		ELSEIF p_fair THEN
			SET v_admit = v_holders + v_ahead < p_lim;
		ELSE
			SET v_admit = v_holders < p_lim;
		END IF;
		IF NOT v_admit THEN
			` + queue + `
			` + markRow + `
			SET o_retry = GREATEST(COALESCE(v_holders_left, 0), 0);
			LEAVE body;
		END IF;
		` + o.nextTokenProc() + `
		IF p_mode = 0 THEN
			IF v_own_live OR v_gone THEN
				` + bindParams(q.deleteHold, "p_key", "p_owner") + `;
			END IF;
			` + bindParams(q.setMain, "p_key", "p_owner", "v_tok", "p_info", "p_ttl") + `;
			SET o_state = 1, o_token = v_tok;
			LEAVE body;
		END IF;
		` + bindParams(q.upsertHold, "p_key", "p_owner", "0", "p_mode", "p_lim", "v_tok", "p_info", "p_ttl") + `;
		` + markRow + `
		SET o_state = 1, o_token = v_tok;`
	return procTx(o.acqProc(), `IN p_key VARBINARY(255), IN p_owner VARBINARY(255), IN p_info VARBINARY(1024),
	IN p_ttl BIGINT, IN p_mode TINYINT, IN p_lim INT, IN p_queue BOOLEAN, IN p_fair BOOLEAN`,
		decls, body, `SELECT o_state, o_token, o_retry, o_mode, o_lim`)
}

// refreshProc is NAME_ref_multi_v1: multiSQL.refreshMulti. Its result row
// is 1 if the owner's live hold was extended, 0 if it had none.
func (o myOps) refreshProc() string {
	q := o.multi()
	decls := `	DECLARE v_one INT;
	DECLARE v_n INT DEFAULT 0;`
	body := `		SELECT 1 INTO v_one FROM ` + o.n.table + ` WHERE lock_key = p_key FOR UPDATE;
		SELECT COUNT(*) INTO v_n FROM ` + o.n.holds + `
			WHERE lock_key = p_key AND owner = p_owner AND waiting = 0 AND expires_at > ` + myNow + ` FOR UPDATE;
		IF v_n = 1 THEN
			` + bindParams(q.refreshHold, "p_ttl", "p_key", "p_owner") + `;
			` + bindParams(q.upsertMarker, "p_key", "p_ttl") + `;
		END IF;`
	return procTx(o.refProc(), `IN p_key VARBINARY(255), IN p_owner VARBINARY(255), IN p_ttl BIGINT`,
		decls, body, `SELECT v_n = 1`)
}

// releaseProc is NAME_rel_multi_v1: with p_main set, multiSQL.releaseMain
// and, if the owner had no lock-table row, multiSQL.releaseMulti;
// otherwise releaseMulti alone. Its result row is (found, live): whether
// the owner had such a row, and whether it was live.
func (o myOps) releaseProc() string {
	q := o.multi()
	t, h := o.n.table, o.n.holds
	decls := `	DECLARE v_one INT;
	DECLARE v_live BOOLEAN DEFAULT NULL;
	DECLARE v_found BOOLEAN DEFAULT FALSE;`
	body := `		SELECT 1 INTO v_one FROM ` + t + ` WHERE lock_key = p_key FOR UPDATE;
		IF p_main THEN
			SELECT expires_at > ` + myNow + ` INTO v_live FROM ` + t + `
				WHERE lock_key = p_key AND owner = p_owner FOR UPDATE;
			IF v_live IS NOT NULL THEN
				` + bindParams(q.deleteOwnMain, "p_key", "p_owner") + `;
				SET v_found = TRUE;
			END IF;
		END IF;
		IF NOT v_found THEN
			SELECT expires_at > ` + myNow + ` INTO v_live FROM ` + h + `
				WHERE lock_key = p_key AND owner = p_owner FOR UPDATE;
			IF v_live IS NOT NULL THEN
				` + bindParams(q.deleteHold, "p_key", "p_owner") + `;
				SET v_found = TRUE;
			END IF;
		END IF;
		IF v_found THEN
			` + bindParams(q.markRow, "p_key", "p_key") + `;
			` + bindParams(q.idleMain, "p_key", "p_key") + `;
			` + bindParams(q.idleHolds, "p_key", "p_key") + `;
		END IF;`
	return procTx(o.relProc(), `IN p_key VARBINARY(255), IN p_owner VARBINARY(255), IN p_main BOOLEAN`,
		decls, body, `SELECT v_found, COALESCE(v_live, FALSE)`)
}

// procsExist reports whether every procedure exists in the current
// database.
func (o myOps) procsExist(ctx context.Context, db *sql.DB) (bool, error) {
	names := o.procNames()
	var n int
	err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.ROUTINES
WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_TYPE = 'PROCEDURE' AND ROUTINE_NAME IN (?, ?, ?)`,
		names[0], names[1], names[2]).Scan(&n)
	return n == len(names), err
}

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

// acquireProcCall runs NAME_acq_multi_v1.
func (o myOps) acquireProcCall(ctx context.Context, db *sql.DB, req driver.Request, ttl int64) (driver.Result, error) {
	var out multiOut
	err := db.QueryRowContext(ctx, `CALL `+o.acqProc()+`(?, ?, ?, ?, ?, ?, ?, ?)`,
		req.Key, req.Owner, req.Info, ttl, int(req.Mode), req.Limit, req.Queue, o.fair).
		Scan(&out.state, &out.token, &out.retry, &out.mode, &out.limit)
	if err != nil {
		return driver.Result{}, err
	}
	return out.result(req)
}

// refreshProcCall runs NAME_ref_multi_v1.
func (o myOps) refreshProcCall(ctx context.Context, db *sql.DB, req driver.Request, ttl int64) (bool, error) {
	var ok bool
	err := o.call(ctx, db, `CALL `+o.refProc()+`(?, ?, ?)`, []any{req.Key, req.Owner, ttl}, &ok)
	return ok, err
}

// releaseProcCall runs NAME_rel_multi_v1.
func (o myOps) releaseProcCall(ctx context.Context, db *sql.DB, req driver.Request, main bool) (found, live bool, err error) {
	err = o.call(ctx, db, `CALL `+o.relProc()+`(?, ?, ?)`, []any{req.Key, req.Owner, main}, &found, &live)
	return found, live && found, err
}
