-- The MySQL/MariaDB schema of dlock's sqldlock, schema version 1 (the lock
-- table records it). In sqldlock/sql/mysql.sql the names are text/template
-- actions: the lock table's name (WithTable, the URL's table parameter) and
-- the names derived from it, each a plain identifier, quoted. `dlock schema
-- --print --url URL` prints the file with the names filled in, for mysql.
-- Each statement follows its "-- name:" line.
--
-- Each procedure runs a READ COMMITTED transaction around its body (a block
-- labelled body, which LEAVE body ends early), so that the key's rows, and
-- the token counter, stay locked only while the server runs it. A failing
-- statement rolls the transaction back and the CALL returns its error.

-- name: lock_table
-- The lock table: one row per key held Exclusive, or the marker (owner '')
-- of the key's rows in the holds table. Its comment is the schema version,
-- which the driver checks before it uses the schema.
CREATE TABLE IF NOT EXISTS {{.Table}} (
	lock_key   VARBINARY(255) NOT NULL PRIMARY KEY,
	owner      VARBINARY(255) NOT NULL,
	token      BIGINT UNSIGNED NOT NULL,
	info       VARBINARY(1024) NOT NULL,
	expires_at DATETIME(6) NOT NULL
) ENGINE=InnoDB COMMENT='dlock schema 1';

-- name: token_seq
-- The fencing-token counter (one row), shared by every key and mode.
CREATE TABLE IF NOT EXISTS {{.Seq}} (
	id TINYINT UNSIGNED NOT NULL PRIMARY KEY,
	v  BIGINT UNSIGNED NOT NULL
) ENGINE=InnoDB;

-- name: token_seq_row
-- The counter's row.
INSERT IGNORE INTO {{.Seq}} (id, v) VALUES (1, 0);

-- name: holds
-- Shared and Semaphore holds, and waiters' queue entries (waiting = 1).
CREATE TABLE IF NOT EXISTS {{.Holds}} (
	lock_key   VARBINARY(255) NOT NULL,
	owner      VARBINARY(255) NOT NULL,
	waiting    TINYINT NOT NULL,
	mode       TINYINT NOT NULL,
	lim        INT NOT NULL,
	token      BIGINT UNSIGNED NOT NULL,
	info       VARBINARY(1024) NOT NULL,
	expires_at DATETIME(6) NOT NULL,
	PRIMARY KEY (lock_key, owner)
) ENGINE=InnoDB;

DELIMITER //

-- name: acquire_multi
-- The whole of an acquisition but the plain read before it (see myOps):
-- multiSQL.acquireMulti, for every mode. p_mode and p_lim are the request's
-- mode (0 Exclusive, 1 Shared, 2 Semaphore) and limit; its result row is
-- (state, token, retry in microseconds, mode, limit), state one of the
-- multi* results (multiOut).
CREATE PROCEDURE {{.AcquireMulti}}(IN p_key VARBINARY(255), IN p_owner VARBINARY(255), IN p_info VARBINARY(1024),
	IN p_ttl BIGINT, IN p_mode TINYINT, IN p_lim INT, IN p_queue BOOLEAN, IN p_fair BOOLEAN)
	MODIFIES SQL DATA
BEGIN
	DECLARE v_now DATETIME(6);
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
	DECLARE o_lim INT DEFAULT NULL;
	DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
	SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
	START TRANSACTION;
	body: BEGIN
		INSERT INTO {{.Table}} (lock_key, owner, token, info, expires_at) VALUES (p_key, '', 0, '', '1970-01-01')
			ON DUPLICATE KEY UPDATE owner = owner;
		DELETE FROM {{.Holds}} WHERE lock_key = p_key AND expires_at <= UTC_TIMESTAMP(6)
			AND (waiting = 0 OR expires_at <= UTC_TIMESTAMP(6) - INTERVAL {{.GoneSeconds}} SECOND);
		SET v_now = UTC_TIMESTAMP(6);
		SELECT owner, token, expires_at > v_now, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
			INTO v_main_owner, v_main_token, v_main_live, v_main_left FROM {{.Table}} WHERE lock_key = p_key;
		SET v_main_found = v_main_owner IS NOT NULL;
		IF v_main_found AND NOT v_main_live THEN
			DELETE FROM {{.Table}} WHERE lock_key = p_key;
			DELETE FROM {{.Holds}} WHERE lock_key = p_key AND waiting = 0;
			SET v_main_found = FALSE;
		END IF;
		SELECT waiting = 1, mode, lim, token, expires_at > v_now
			INTO v_own_waiting, v_own_mode, v_own_lim, v_own_token, v_own_live
			FROM {{.Holds}} WHERE lock_key = p_key AND owner = p_owner;
		IF v_own_waiting IS NULL THEN
			SET v_own_live = FALSE;
		ELSE
			SET v_gone = NOT v_own_live AND v_own_waiting;
		END IF;
		IF v_main_found AND v_main_owner <> '' THEN
			IF v_main_owner = p_owner THEN
				IF p_mode = 1 THEN
					UPDATE {{.Table}} SET owner = '', token = 0, info = '', expires_at = UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND WHERE lock_key = p_key;
					INSERT INTO {{.Holds}} (lock_key, owner, waiting, mode, lim, token, info, expires_at)
						VALUES (p_key, p_owner, 0, 1, 0, v_main_token, p_info, UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND)
						ON DUPLICATE KEY UPDATE waiting = VALUES(waiting), mode = VALUES(mode), lim = VALUES(lim),
						token = VALUES(token), info = VALUES(info), expires_at = VALUES(expires_at);
					INSERT INTO {{.Table}} (lock_key, owner, token, info, expires_at)
						SELECT p_key, '', 0, '', m FROM (SELECT MAX(expires_at) AS m FROM {{.Holds}} WHERE lock_key = p_key AND expires_at > UTC_TIMESTAMP(6)) AS x
						WHERE m IS NOT NULL
						ON DUPLICATE KEY UPDATE token = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), 0, token), info = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), '', info),
						owner = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), '', owner), expires_at = IF(owner = '', VALUES(expires_at), expires_at);
					SET o_state = 1, o_token = v_main_token;
					LEAVE body;
				ELSEIF p_mode = 2 THEN
					SET o_state = 3;
					LEAVE body;
				END IF;
				INSERT INTO {{.Table}} (lock_key, owner, token, info, expires_at) VALUES (p_key, p_owner, v_main_token, p_info, UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND)
					ON DUPLICATE KEY UPDATE owner = VALUES(owner), token = VALUES(token), info = VALUES(info),
					expires_at = VALUES(expires_at);
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
			IF p_queue THEN
				IF v_own_live THEN
					UPDATE {{.Holds}} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND WHERE lock_key = p_key AND owner = p_owner;
				ELSE
					UPDATE {{.Seq}} SET v = LAST_INSERT_ID(v + 1) WHERE id = 1;
					SET v_tok = LAST_INSERT_ID();
					INSERT INTO {{.Holds}} (lock_key, owner, waiting, mode, lim, token, info, expires_at)
						VALUES (p_key, p_owner, 1, p_mode, p_lim, v_tok, '', UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND)
						ON DUPLICATE KEY UPDATE waiting = VALUES(waiting), mode = VALUES(mode), lim = VALUES(lim),
						token = VALUES(token), info = VALUES(info), expires_at = VALUES(expires_at);
				END IF;
			END IF;
			SET o_retry = GREATEST(v_main_left, 0);
			LEAVE body;
		END IF;
		IF v_own_live AND NOT v_own_waiting THEN
			IF v_own_mode <> p_mode OR p_mode = 2 AND v_own_lim <> p_lim THEN
				SET o_state = 5, o_mode = v_own_mode, o_lim = v_own_lim;
				LEAVE body;
			END IF;
			UPDATE {{.Holds}} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND WHERE lock_key = p_key AND owner = p_owner;
			INSERT INTO {{.Table}} (lock_key, owner, token, info, expires_at) VALUES (p_key, '', 0, '', UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND)
				ON DUPLICATE KEY UPDATE expires_at = IF(owner = '', GREATEST(expires_at, VALUES(expires_at)), expires_at);
			SET o_state = 1, o_token = v_own_token;
			LEAVE body;
		END IF;
		SELECT COUNT(*), COALESCE(MAX(mode = 0), FALSE), MIN(TIMESTAMPDIFF(MICROSECOND, v_now, expires_at))
			INTO v_holders, v_holders_excl, v_holders_left FROM {{.Holds}}
			WHERE lock_key = p_key AND owner <> p_owner AND waiting = 0 AND expires_at > v_now;
		SELECT mode, lim INTO v_first_mode, v_first_lim FROM {{.Holds}}
			WHERE lock_key = p_key AND owner <> p_owner AND waiting = 0 AND expires_at > v_now
			ORDER BY token LIMIT 1;
		IF v_first_mode IS NULL THEN
			SELECT mode, lim INTO v_first_mode, v_first_lim FROM {{.Holds}}
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
		SELECT COUNT(*), COALESCE(MAX(mode = 0), FALSE) INTO v_ahead, v_ahead_excl FROM {{.Holds}}
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
			IF p_queue THEN
				IF v_own_live THEN
					UPDATE {{.Holds}} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND WHERE lock_key = p_key AND owner = p_owner;
				ELSE
					UPDATE {{.Seq}} SET v = LAST_INSERT_ID(v + 1) WHERE id = 1;
					SET v_tok = LAST_INSERT_ID();
					INSERT INTO {{.Holds}} (lock_key, owner, waiting, mode, lim, token, info, expires_at)
						VALUES (p_key, p_owner, 1, p_mode, p_lim, v_tok, '', UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND)
						ON DUPLICATE KEY UPDATE waiting = VALUES(waiting), mode = VALUES(mode), lim = VALUES(lim),
						token = VALUES(token), info = VALUES(info), expires_at = VALUES(expires_at);
				END IF;
			END IF;
			INSERT INTO {{.Table}} (lock_key, owner, token, info, expires_at)
				SELECT p_key, '', 0, '', m FROM (SELECT MAX(expires_at) AS m FROM {{.Holds}} WHERE lock_key = p_key AND expires_at > UTC_TIMESTAMP(6)) AS x
				WHERE m IS NOT NULL
				ON DUPLICATE KEY UPDATE token = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), 0, token), info = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), '', info),
				owner = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), '', owner), expires_at = IF(owner = '', VALUES(expires_at), expires_at);
			SET o_retry = GREATEST(COALESCE(v_holders_left, 0), 0);
			LEAVE body;
		END IF;
		UPDATE {{.Seq}} SET v = LAST_INSERT_ID(v + 1) WHERE id = 1;
		SET v_tok = LAST_INSERT_ID();
		IF p_mode = 0 THEN
			IF v_own_live OR v_gone THEN
				DELETE FROM {{.Holds}} WHERE lock_key = p_key AND owner = p_owner;
			END IF;
			INSERT INTO {{.Table}} (lock_key, owner, token, info, expires_at) VALUES (p_key, p_owner, v_tok, p_info, UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND)
				ON DUPLICATE KEY UPDATE owner = VALUES(owner), token = VALUES(token), info = VALUES(info),
				expires_at = VALUES(expires_at);
			SET o_state = 1, o_token = v_tok;
			LEAVE body;
		END IF;
		INSERT INTO {{.Holds}} (lock_key, owner, waiting, mode, lim, token, info, expires_at)
			VALUES (p_key, p_owner, 0, p_mode, p_lim, v_tok, p_info, UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND)
			ON DUPLICATE KEY UPDATE waiting = VALUES(waiting), mode = VALUES(mode), lim = VALUES(lim),
			token = VALUES(token), info = VALUES(info), expires_at = VALUES(expires_at);
		INSERT INTO {{.Table}} (lock_key, owner, token, info, expires_at)
			SELECT p_key, '', 0, '', m FROM (SELECT MAX(expires_at) AS m FROM {{.Holds}} WHERE lock_key = p_key AND expires_at > UTC_TIMESTAMP(6)) AS x
			WHERE m IS NOT NULL
			ON DUPLICATE KEY UPDATE token = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), 0, token), info = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), '', info),
			owner = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), '', owner), expires_at = IF(owner = '', VALUES(expires_at), expires_at);
		SET o_state = 1, o_token = v_tok;
	END body;
	COMMIT;
	SELECT o_state, o_token, o_retry, o_mode, o_lim;
END //

-- name: refresh_multi
-- The refresh of a Shared or Semaphore hold (multiSQL.refreshMulti): its
-- result row is 1 if the owner's live hold was extended, 0 if it had none.
CREATE PROCEDURE {{.RefreshMulti}}(IN p_key VARBINARY(255), IN p_owner VARBINARY(255), IN p_ttl BIGINT)
	MODIFIES SQL DATA
BEGIN
	DECLARE v_one INT;
	DECLARE v_n INT DEFAULT 0;
	DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
	SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
	START TRANSACTION;
	body: BEGIN
		SELECT 1 INTO v_one FROM {{.Table}} WHERE lock_key = p_key FOR UPDATE;
		SELECT COUNT(*) INTO v_n FROM {{.Holds}}
			WHERE lock_key = p_key AND owner = p_owner AND waiting = 0 AND expires_at > UTC_TIMESTAMP(6) FOR UPDATE;
		IF v_n = 1 THEN
			UPDATE {{.Holds}} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND
				WHERE lock_key = p_key AND owner = p_owner AND waiting = 0 AND expires_at > UTC_TIMESTAMP(6);
			INSERT INTO {{.Table}} (lock_key, owner, token, info, expires_at) VALUES (p_key, '', 0, '', UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND)
				ON DUPLICATE KEY UPDATE expires_at = IF(owner = '', GREATEST(expires_at, VALUES(expires_at)), expires_at);
		END IF;
	END body;
	COMMIT;
	SELECT v_n = 1;
END //

-- name: release_multi
-- With p_main set, multiSQL.releaseMain and, if the owner had no
-- lock-table row, multiSQL.releaseMulti; otherwise releaseMulti alone. Its
-- result row is (found, live): whether the owner had such a row, and whether
-- it was live.
CREATE PROCEDURE {{.ReleaseMulti}}(IN p_key VARBINARY(255), IN p_owner VARBINARY(255), IN p_main BOOLEAN)
	MODIFIES SQL DATA
BEGIN
	DECLARE v_one INT;
	DECLARE v_live BOOLEAN DEFAULT NULL;
	DECLARE v_found BOOLEAN DEFAULT FALSE;
	DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
	SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
	START TRANSACTION;
	body: BEGIN
		SELECT 1 INTO v_one FROM {{.Table}} WHERE lock_key = p_key FOR UPDATE;
		IF p_main THEN
			SELECT expires_at > UTC_TIMESTAMP(6) INTO v_live FROM {{.Table}}
				WHERE lock_key = p_key AND owner = p_owner FOR UPDATE;
			IF v_live IS NOT NULL THEN
				DELETE FROM {{.Table}} WHERE lock_key = p_key AND owner = p_owner;
				SET v_found = TRUE;
			END IF;
		END IF;
		IF NOT v_found THEN
			SELECT expires_at > UTC_TIMESTAMP(6) INTO v_live FROM {{.Holds}}
				WHERE lock_key = p_key AND owner = p_owner FOR UPDATE;
			IF v_live IS NOT NULL THEN
				DELETE FROM {{.Holds}} WHERE lock_key = p_key AND owner = p_owner;
				SET v_found = TRUE;
			END IF;
		END IF;
		IF v_found THEN
			INSERT INTO {{.Table}} (lock_key, owner, token, info, expires_at)
				SELECT p_key, '', 0, '', m FROM (SELECT MAX(expires_at) AS m FROM {{.Holds}} WHERE lock_key = p_key AND expires_at > UTC_TIMESTAMP(6)) AS x
				WHERE m IS NOT NULL
				ON DUPLICATE KEY UPDATE token = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), 0, token), info = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), '', info),
				owner = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), '', owner), expires_at = IF(owner = '', VALUES(expires_at), expires_at);
			DELETE FROM {{.Table}} WHERE lock_key = p_key AND (owner = '' OR expires_at <= UTC_TIMESTAMP(6))
				AND NOT EXISTS (SELECT 1 FROM {{.Holds}} WHERE lock_key = p_key AND expires_at > UTC_TIMESTAMP(6));
			DELETE FROM {{.Holds}} WHERE lock_key = p_key AND waiting = 0 AND expires_at <= UTC_TIMESTAMP(6)
				AND NOT EXISTS (SELECT 1 FROM {{.Table}} WHERE lock_key = p_key);
		END IF;
	END body;
	COMMIT;
	SELECT v_found, COALESCE(v_live, FALSE);
END //

DELIMITER ;

