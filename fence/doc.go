// Package fence makes the resources a dlock lock protects reject writes from
// holders that have lost the lock.
//
// A lease cannot stop a holder that was paused (a GC pause, a stopped VM, a
// slow network) past its expiry from waking up and writing: by then the lock
// may have passed to another holder. Every hold has a fencing token,
// (*dlock.Lock).Token, which is higher than the token of every earlier
// holder of the key on the backends with durable tokens. Fencing means the
// resource records the highest token it has accepted and refuses a write
// with a lower one, in the same atomic step as the write. A refusal is a
// *StaleTokenError, which matches ErrStaleToken with errors.Is. An equal
// token passes, so one holder may write several times.
//
// # SQL
//
// SQL (NewSQL) works in the caller's transaction, on PostgreSQL,
// MySQL/MariaDB and SQLite, with the standard database/sql. Check records a
// token for a resource name in a fence table (CreateTable makes it: resource
// name, highest token) and locks its row until the transaction ends. Call it
// first in the transaction that writes the resource, and roll back if it
// fails:
//
//	tx, err := db.BeginTx(ctx, nil)
//	...
//	defer tx.Rollback()
//	if err := f.Check(ctx, tx, "phone:13800000000", lock.Token()); err != nil {
//		return err // errors.Is(err, fence.ErrStaleToken): the lock has passed on
//	}
//	// the guarded writes, in tx
//	return tx.Commit()
//
// Update writes rows of an application table that carries the token of its
// last write in a column of its own, under the condition that the column
// holds no higher token, and tells a stale token from a missing row:
//
//	UPDATE "stock" SET "qty" = ?, "fence_token" = ?
//	WHERE "sku" = ? AND COALESCE("fence_token", 0) <= ?
//
// Table and column names are checked to be plain identifiers and quoted;
// values are always bind parameters. Tokens are kept in signed 64-bit
// columns, so a token above math.MaxInt64 is refused with a *dlock.ArgError
// rather than wrapped around to a negative number (which would order it
// below every other token). dlock's backends count tokens up from 1 and do
// not come near that bound.
//
// # Redis
//
// Redis (NewRedis) keeps a value and the token it was written with in one
// hash, written by a Lua script that compares the tokens (EVALSHA, with EVAL
// when the script is not loaded), so the comparison and the write are one
// step on the server. Tokens are compared exactly over the whole uint64
// range.
//
// # etcd
//
// On etcd, the data the lock protects can be guarded without a token at
// all: etcddlock's (*Driver).IsOwner returns a comparison that holds while
// the lock's entry exists with the lock's token as its creation revision.
// Put it in the If of the transaction that writes the data:
//
//	resp, err := cli.Txn(ctx).If(d.IsOwner(lock)).Then(clientv3.OpPut(k, v)).Commit()
//	// !resp.Succeeded: the lock was lost; nothing was written
//
// The store of the lock then refuses the late write itself, even before the
// holder notices the loss.
//
// # Which tokens fence
//
// Tokens order holders only on backends whose tokens are durable
// (Capabilities.DurableTokens: sqldlock, etcddlock, zkdlock). A backend
// that can forget its counter (redisdlock, whose counter is only as durable
// as the server's persistence, memcached, Redlock) may hand a low token out
// again after a restart, and a fence then refuses the new holder: use those
// for locks of efficiency, not correctness.
package fence
