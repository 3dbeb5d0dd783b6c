-- The PostgreSQL schema of dlock's sqldlock, schema version 1 (the lock
-- table records it). In sqldlock/sql/postgres.sql the names are text/template
-- actions: the lock table's name (WithTable, the URL's table parameter) and
-- the names derived from it, each a plain identifier, quoted. `dlock schema
-- --print --url URL` prints the file with the names filled in, for psql.
-- Each statement follows its "-- name:" line.

-- name: lock_table
-- The lock table: one row per key held Exclusive, or the marker (owner '')
-- of the key's rows in the holds table.
CREATE TABLE IF NOT EXISTS {{.Table}} (
	lock_key   text COLLATE "C" PRIMARY KEY,
	owner      text NOT NULL,
	token      bigint NOT NULL,
	info       text NOT NULL,
	expires_at timestamptz NOT NULL
);

-- name: token_seq
-- The fencing-token counter, shared by every key and mode.
CREATE SEQUENCE IF NOT EXISTS {{.Seq}};

-- name: holds
-- Shared and Semaphore holds, and waiters' queue entries (waiting = 1).
CREATE TABLE IF NOT EXISTS {{.Holds}} (
	lock_key   text COLLATE "C" NOT NULL,
	owner      text NOT NULL,
	waiting    smallint NOT NULL,
	mode       smallint NOT NULL,
	lim        integer NOT NULL,
	token      bigint NOT NULL,
	info       text NOT NULL,
	expires_at timestamptz NOT NULL,
	PRIMARY KEY (lock_key, owner)
);

-- name: acquire
-- An Exclusive Acquire in one statement (see pgOps). p_queued: the owner
-- may have a queue entry, deleted on success; p_fair: take an expired row over
-- only if no other owner's queue entry is live.
CREATE OR REPLACE FUNCTION {{.Acquire}}(
	p_key text, p_owner text, p_info text, p_ttl_us bigint, p_queued boolean, p_fair boolean,
	OUT o_acquired boolean, OUT o_token bigint, OUT o_retry_us bigint, OUT o_marked boolean)
LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO {{.Table}} AS l (lock_key, owner, token, info, expires_at)
	VALUES (p_key, p_owner, 0, p_info, clock_timestamp() + p_ttl_us * interval '1 microsecond')
	ON CONFLICT (lock_key) DO UPDATE SET
		owner = excluded.owner,
		info = excluded.info,
		expires_at = clock_timestamp() + p_ttl_us * interval '1 microsecond',
		token = CASE WHEN l.owner = excluded.owner AND l.expires_at > clock_timestamp()
			THEN l.token WHEN l.owner = '' THEN -1 ELSE -2 END
	WHERE l.owner = excluded.owner OR l.expires_at <= clock_timestamp()
	RETURNING l.token INTO o_token;
	IF NOT FOUND THEN
		o_acquired := false;
		SELECT (extract(epoch FROM l.expires_at - clock_timestamp()) * 1000000)::bigint, l.owner = ''
			INTO o_retry_us, o_marked FROM {{.Table}} AS l WHERE l.lock_key = p_key;
		RETURN;
	END IF;
	IF o_token < 0 AND p_fair THEN
		IF EXISTS (SELECT 1 FROM {{.Holds}} WHERE lock_key = p_key AND waiting = 1 AND owner <> p_owner
			AND expires_at > clock_timestamp()) THEN
			UPDATE {{.Table}} SET owner = '', token = 0, info = '', expires_at = (SELECT max(expires_at)
				FROM {{.Holds}} WHERE lock_key = p_key AND expires_at > clock_timestamp())
				WHERE lock_key = p_key;
			o_acquired := false;
			o_marked := true;
			RETURN;
		END IF;
	END IF;
	o_acquired := true;
	IF o_token = -1 THEN
		DELETE FROM {{.Holds}} WHERE lock_key = p_key AND waiting = 0;
	END IF;
	IF o_token < 0 THEN
		o_token := 0;
	END IF;
	IF p_queued THEN
		DELETE FROM {{.Holds}} WHERE lock_key = p_key AND owner = p_owner;
	END IF;
	IF o_token = 0 THEN
		UPDATE {{.Table}} SET token = nextval('{{.Seq}}')
			WHERE lock_key = p_key RETURNING token INTO o_token;
	END IF;
END
$$;

-- name: release
-- The release of an Exclusive hold by a fair driver: deletes the row and
-- leaves the marker of the key's live queue entries, if any.
CREATE OR REPLACE FUNCTION {{.Release}}(p_key text, p_owner text, OUT o_live boolean)
LANGUAGE plpgsql AS $$
BEGIN
	DELETE FROM {{.Table}} WHERE lock_key = p_key AND owner = p_owner
		RETURNING expires_at > clock_timestamp() INTO o_live;
	IF NOT FOUND THEN
		RETURN;
	END IF;
	INSERT INTO {{.Table}} (lock_key, owner, token, info, expires_at)
	SELECT p_key, '', 0, '', max(expires_at) FROM {{.Holds}}
	WHERE lock_key = p_key AND waiting = 1 AND expires_at > clock_timestamp()
	HAVING count(*) > 0;
	PERFORM pg_notify('{{.Channel}}', p_key);
END
$$;

-- name: wait
-- Queues a waiter behind another owner's live Exclusive hold, or renews
-- its entry (o_state 1); o_state 2: its place was lost; 0: the key is not so
-- held.
CREATE OR REPLACE FUNCTION {{.Wait}}(
	p_key text, p_owner text, p_mode smallint, p_lim integer, p_ttl_us bigint,
	OUT o_state smallint, OUT o_retry_us bigint)
LANGUAGE plpgsql AS $$
DECLARE
	w record;
BEGIN
	o_state := 0;
	SELECT (extract(epoch FROM l.expires_at - clock_timestamp()) * 1000000)::bigint AS left_us
		INTO o_retry_us FROM {{.Table}} AS l
		WHERE l.lock_key = p_key AND l.owner <> '' AND l.owner <> p_owner
		AND l.expires_at > clock_timestamp() FOR UPDATE;
	IF NOT FOUND THEN
		o_retry_us := NULL;
		RETURN;
	END IF;
	DELETE FROM {{.Holds}} WHERE lock_key = p_key AND expires_at <= clock_timestamp()
		AND (waiting = 0 OR expires_at <= clock_timestamp() - interval '{{.GoneSeconds}} seconds');
	SELECT waiting, expires_at > clock_timestamp() AS live INTO w FROM {{.Holds}}
		WHERE lock_key = p_key AND owner = p_owner;
	IF FOUND AND w.live THEN
		UPDATE {{.Holds}} SET expires_at = clock_timestamp() + p_ttl_us * interval '1 microsecond'
			WHERE lock_key = p_key AND owner = p_owner;
	ELSIF FOUND AND w.waiting = 1 THEN
		o_state := 2;
		RETURN;
	ELSE
		INSERT INTO {{.Holds}} (lock_key, owner, waiting, mode, lim, token, info, expires_at)
		VALUES (p_key, p_owner, 1, p_mode, p_lim, nextval('{{.Seq}}'), '',
			clock_timestamp() + p_ttl_us * interval '1 microsecond')
		ON CONFLICT (lock_key, owner) DO UPDATE SET waiting = excluded.waiting, mode = excluded.mode,
			lim = excluded.lim, token = excluded.token, info = excluded.info, expires_at = excluded.expires_at;
	END IF;
	o_state := 1;
END
$$;

-- name: acquire_multi
-- The holds-table acquisition (multiSQL.acquireMulti) in one statement.
-- p_mode and p_lim are the request's mode (0 Exclusive, 1 Shared, 2
-- Semaphore) and limit; o_state is one of the multi* results (multiOut).
CREATE OR REPLACE FUNCTION {{.AcquireMulti}}(
	p_key text, p_owner text, p_info text, p_ttl_us bigint, p_mode smallint, p_lim integer,
	p_queue boolean, p_fair boolean,
	OUT o_state smallint, OUT o_token bigint, OUT o_retry_us bigint, OUT o_mode smallint, OUT o_lim integer)
LANGUAGE plpgsql AS $$
DECLARE
	v_now timestamptz;
	v_main_found boolean;
	v_main_owner text;
	v_main_token bigint;
	v_main_live boolean;
	v_main_left bigint;
	v_own_found boolean;
	v_own_waiting boolean;
	v_own_mode smallint;
	v_own_lim integer;
	v_own_token bigint;
	v_own_live boolean := false;
	v_gone boolean := false;
	v_first_found boolean;
	v_first_mode smallint;
	v_first_lim integer;
	v_holders integer;
	v_holders_excl boolean;
	v_holders_left bigint;
	v_ahead integer;
	v_ahead_excl boolean;
	v_admit boolean;
	v_tok bigint;
BEGIN
	o_state := 0;
	INSERT INTO {{.Table}} AS l (lock_key, owner, token, info, expires_at) VALUES (p_key, '', 0, '', 'epoch')
	ON CONFLICT (lock_key) DO UPDATE SET owner = l.owner;
	DELETE FROM {{.Holds}} WHERE lock_key = p_key AND expires_at <= clock_timestamp()
		AND (waiting = 0 OR expires_at <= clock_timestamp() - interval '{{.GoneSeconds}} seconds');
	v_now := clock_timestamp();
	SELECT owner, token, expires_at > v_now, (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint
		INTO v_main_owner, v_main_token, v_main_live, v_main_left FROM {{.Table}} WHERE lock_key = p_key;
	v_main_found := FOUND;
	IF v_main_found AND NOT v_main_live THEN
		DELETE FROM {{.Table}} WHERE lock_key = p_key;
		DELETE FROM {{.Holds}} WHERE lock_key = p_key AND waiting = 0;
		v_main_found := false;
	END IF;
	SELECT waiting = 1, mode, lim, token, expires_at > v_now
		INTO v_own_waiting, v_own_mode, v_own_lim, v_own_token, v_own_live
		FROM {{.Holds}} WHERE lock_key = p_key AND owner = p_owner;
	v_own_found := FOUND;
	IF v_own_found THEN
		v_gone := NOT v_own_live AND v_own_waiting;
	ELSE
		v_own_live := false;
	END IF;

	IF v_main_found AND v_main_owner <> '' THEN
		IF v_main_owner = p_owner THEN
			IF p_mode = 1 THEN
				UPDATE {{.Table}} SET owner = '', token = 0, info = '', expires_at = clock_timestamp() + p_ttl_us * interval '1 microsecond' WHERE lock_key = p_key;
				INSERT INTO {{.Holds}} (lock_key, owner, waiting, mode, lim, token, info, expires_at)
					VALUES (p_key, p_owner, 0, 1, 0, v_main_token, p_info, clock_timestamp() + p_ttl_us * interval '1 microsecond')
					ON CONFLICT (lock_key, owner) DO UPDATE SET waiting = excluded.waiting, mode = excluded.mode,
					lim = excluded.lim, token = excluded.token, info = excluded.info, expires_at = excluded.expires_at;
				INSERT INTO {{.Table}} AS l (lock_key, owner, token, info, expires_at)
					SELECT p_key, '', 0, '', x.m FROM (SELECT max(expires_at) AS m FROM {{.Holds}}
					WHERE lock_key = p_key AND expires_at > clock_timestamp()) AS x
					WHERE x.m IS NOT NULL
					ON CONFLICT (lock_key) DO UPDATE SET owner = '', token = 0, info = '', expires_at = excluded.expires_at
					WHERE l.owner = '' OR l.expires_at <= clock_timestamp();
				PERFORM pg_notify('{{.Channel}}', p_key);
				o_state := 1;
				o_token := v_main_token;
				RETURN;
			ELSIF p_mode = 2 THEN
				o_state := 3;
				RETURN;
			END IF;
			INSERT INTO {{.Table}} (lock_key, owner, token, info, expires_at)
				VALUES (p_key, p_owner, v_main_token, p_info, clock_timestamp() + p_ttl_us * interval '1 microsecond')
				ON CONFLICT (lock_key) DO UPDATE SET owner = excluded.owner, token = excluded.token,
				info = excluded.info, expires_at = excluded.expires_at;
			o_state := 1;
			o_token := v_main_token;
			RETURN;
		END IF;
		IF p_mode = 2 THEN
			o_state := 4;
			RETURN;
		END IF;
		IF v_gone AND p_queue THEN
			o_state := 2;
			RETURN;
		END IF;
		IF p_queue THEN
			IF v_own_live THEN
				UPDATE {{.Holds}} SET expires_at = clock_timestamp() + p_ttl_us * interval '1 microsecond' WHERE lock_key = p_key AND owner = p_owner;
			ELSE
				INSERT INTO {{.Holds}} (lock_key, owner, waiting, mode, lim, token, info, expires_at)
					VALUES (p_key, p_owner, 1, p_mode, p_lim, nextval('{{.Seq}}'), '', clock_timestamp() + p_ttl_us * interval '1 microsecond')
					ON CONFLICT (lock_key, owner) DO UPDATE SET waiting = excluded.waiting, mode = excluded.mode,
					lim = excluded.lim, token = excluded.token, info = excluded.info, expires_at = excluded.expires_at;
			END IF;
		END IF;
		o_retry_us := greatest(v_main_left, 0);
		RETURN;
	END IF;

	IF v_own_live AND NOT v_own_waiting THEN
		IF v_own_mode <> p_mode OR p_mode = 2 AND v_own_lim <> p_lim THEN
			o_state := 5;
			o_mode := v_own_mode;
			o_lim := v_own_lim;
			RETURN;
		END IF;
		UPDATE {{.Holds}} SET expires_at = clock_timestamp() + p_ttl_us * interval '1 microsecond' WHERE lock_key = p_key AND owner = p_owner;
		INSERT INTO {{.Table}} AS l (lock_key, owner, token, info, expires_at)
			VALUES (p_key, '', 0, '', clock_timestamp() + p_ttl_us * interval '1 microsecond')
			ON CONFLICT (lock_key) DO UPDATE SET expires_at = greatest(l.expires_at, excluded.expires_at)
			WHERE l.owner = '';
		o_state := 1;
		o_token := v_own_token;
		RETURN;
	END IF;
	SELECT count(*), coalesce(bool_or(mode = 0), false), min((extract(epoch FROM expires_at - v_now) * 1000000)::bigint)
		INTO v_holders, v_holders_excl, v_holders_left FROM {{.Holds}}
		WHERE lock_key = p_key AND owner <> p_owner AND waiting = 0 AND expires_at > v_now;
	SELECT mode, lim INTO v_first_mode, v_first_lim FROM {{.Holds}}
		WHERE lock_key = p_key AND owner <> p_owner AND waiting = 0 AND expires_at > v_now
		ORDER BY token LIMIT 1;
	v_first_found := FOUND;
	IF NOT v_first_found THEN
		SELECT mode, lim INTO v_first_mode, v_first_lim FROM {{.Holds}}
			WHERE lock_key = p_key AND waiting = 1 AND expires_at > v_now
			AND (owner <> p_owner OR v_own_live)
			ORDER BY token LIMIT 1;
		v_first_found := FOUND;
	END IF;
	IF v_first_found AND ((p_mode = 2) <> (v_first_mode = 2) OR v_first_mode = 2 AND v_first_lim <> p_lim) THEN
		o_state := 6;
		o_mode := v_first_mode;
		o_lim := v_first_lim;
		RETURN;
	END IF;
	IF v_gone AND p_queue THEN
		o_state := 2;
		RETURN;
	END IF;
	SELECT count(*), coalesce(bool_or(mode = 0), false) INTO v_ahead, v_ahead_excl FROM {{.Holds}}
		WHERE lock_key = p_key AND owner <> p_owner AND waiting = 1 AND expires_at > v_now
		AND (NOT v_own_live OR token < v_own_token);
	IF p_mode = 0 THEN
		v_admit := v_holders = 0 AND (NOT p_fair OR v_ahead = 0);
	ELSIF p_mode = 1 THEN
		v_admit := NOT v_holders_excl AND NOT v_ahead_excl;
	ELSIF p_fair THEN
		v_admit := v_holders + v_ahead < p_lim;
	ELSE
		v_admit := v_holders < p_lim;
	END IF;
	IF NOT v_admit THEN
		IF p_queue THEN
			IF v_own_live THEN
				UPDATE {{.Holds}} SET expires_at = clock_timestamp() + p_ttl_us * interval '1 microsecond' WHERE lock_key = p_key AND owner = p_owner;
			ELSE
				INSERT INTO {{.Holds}} (lock_key, owner, waiting, mode, lim, token, info, expires_at)
					VALUES (p_key, p_owner, 1, p_mode, p_lim, nextval('{{.Seq}}'), '', clock_timestamp() + p_ttl_us * interval '1 microsecond')
					ON CONFLICT (lock_key, owner) DO UPDATE SET waiting = excluded.waiting, mode = excluded.mode,
					lim = excluded.lim, token = excluded.token, info = excluded.info, expires_at = excluded.expires_at;
			END IF;
		END IF;
		INSERT INTO {{.Table}} AS l (lock_key, owner, token, info, expires_at)
			SELECT p_key, '', 0, '', x.m FROM (SELECT max(expires_at) AS m FROM {{.Holds}}
			WHERE lock_key = p_key AND expires_at > clock_timestamp()) AS x
			WHERE x.m IS NOT NULL
			ON CONFLICT (lock_key) DO UPDATE SET owner = '', token = 0, info = '', expires_at = excluded.expires_at
			WHERE l.owner = '' OR l.expires_at <= clock_timestamp();
		o_retry_us := greatest(coalesce(v_holders_left, 0), 0);
		RETURN;
	END IF;
	v_tok := nextval('{{.Seq}}');
	IF p_mode = 0 THEN
		IF v_own_live OR v_gone THEN
			DELETE FROM {{.Holds}} WHERE lock_key = p_key AND owner = p_owner;
		END IF;
		INSERT INTO {{.Table}} (lock_key, owner, token, info, expires_at)
			VALUES (p_key, p_owner, v_tok, p_info, clock_timestamp() + p_ttl_us * interval '1 microsecond')
			ON CONFLICT (lock_key) DO UPDATE SET owner = excluded.owner, token = excluded.token,
			info = excluded.info, expires_at = excluded.expires_at;
		o_state := 1;
		o_token := v_tok;
		RETURN;
	END IF;
	INSERT INTO {{.Holds}} (lock_key, owner, waiting, mode, lim, token, info, expires_at)
		VALUES (p_key, p_owner, 0, p_mode, p_lim, v_tok, p_info, clock_timestamp() + p_ttl_us * interval '1 microsecond')
		ON CONFLICT (lock_key, owner) DO UPDATE SET waiting = excluded.waiting, mode = excluded.mode,
		lim = excluded.lim, token = excluded.token, info = excluded.info, expires_at = excluded.expires_at;
	INSERT INTO {{.Table}} AS l (lock_key, owner, token, info, expires_at)
		SELECT p_key, '', 0, '', x.m FROM (SELECT max(expires_at) AS m FROM {{.Holds}}
		WHERE lock_key = p_key AND expires_at > clock_timestamp()) AS x
		WHERE x.m IS NOT NULL
		ON CONFLICT (lock_key) DO UPDATE SET owner = '', token = 0, info = '', expires_at = excluded.expires_at
		WHERE l.owner = '' OR l.expires_at <= clock_timestamp();
	IF v_own_live THEN
		PERFORM pg_notify('{{.Channel}}', p_key);
	END IF;
	o_state := 1;
	o_token := v_tok;
END
$$;

-- name: refresh_multi
-- The refresh of a Shared or Semaphore hold (multiSQL.refreshMulti); o_ok
-- reports whether the owner's live hold was extended.
CREATE OR REPLACE FUNCTION {{.RefreshMulti}}(p_key text, p_owner text, p_ttl_us bigint, OUT o_ok boolean)
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM 1 FROM {{.Table}} WHERE lock_key = p_key FOR UPDATE;
	UPDATE {{.Holds}} SET expires_at = clock_timestamp() + p_ttl_us * interval '1 microsecond'
		WHERE lock_key = p_key AND owner = p_owner AND waiting = 0 AND expires_at > clock_timestamp();
	o_ok := FOUND;
	IF o_ok THEN
		INSERT INTO {{.Table}} AS l (lock_key, owner, token, info, expires_at)
			VALUES (p_key, '', 0, '', clock_timestamp() + p_ttl_us * interval '1 microsecond')
			ON CONFLICT (lock_key) DO UPDATE SET expires_at = greatest(l.expires_at, excluded.expires_at)
			WHERE l.owner = '';
	END IF;
END
$$;

-- name: release_multi
-- The release of a holds-table row (multiSQL.releaseMulti); o_found
-- reports whether the owner had one, o_live whether it was live.
CREATE OR REPLACE FUNCTION {{.ReleaseMulti}}(p_key text, p_owner text, OUT o_found boolean, OUT o_live boolean)
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM 1 FROM {{.Table}} WHERE lock_key = p_key FOR UPDATE;
	DELETE FROM {{.Holds}} WHERE lock_key = p_key AND owner = p_owner
		RETURNING expires_at > clock_timestamp() INTO o_live;
	o_found := FOUND;
	IF NOT o_found THEN
		o_live := false;
		RETURN;
	END IF;
	INSERT INTO {{.Table}} AS l (lock_key, owner, token, info, expires_at)
		SELECT p_key, '', 0, '', x.m FROM (SELECT max(expires_at) AS m FROM {{.Holds}}
		WHERE lock_key = p_key AND expires_at > clock_timestamp()) AS x
		WHERE x.m IS NOT NULL
		ON CONFLICT (lock_key) DO UPDATE SET owner = '', token = 0, info = '', expires_at = excluded.expires_at
		WHERE l.owner = '' OR l.expires_at <= clock_timestamp();
	DELETE FROM {{.Table}} WHERE lock_key = p_key AND (owner = '' OR expires_at <= clock_timestamp())
		AND NOT EXISTS (SELECT 1 FROM {{.Holds}} WHERE lock_key = p_key AND expires_at > clock_timestamp());
	DELETE FROM {{.Holds}} WHERE lock_key = p_key AND waiting = 0 AND expires_at <= clock_timestamp()
		AND NOT EXISTS (SELECT 1 FROM {{.Table}} WHERE lock_key = p_key);
	PERFORM pg_notify('{{.Channel}}', p_key);
END
$$;

-- name: version
-- The schema version, which the driver checks before it uses the schema.
COMMENT ON TABLE {{.Table}} IS 'dlock schema 1';
