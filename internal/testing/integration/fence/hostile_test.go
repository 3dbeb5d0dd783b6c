package fence_test

import (
	"database/sql"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock/fence"
	"github.com/dlockhq/dlock/internal/testing/dlocktest/bounds"
)

// TestHostileInputSQL: nil contexts and databases, resource names that are
// not valid UTF-8 or contain a NUL byte (which PostgreSQL's text refuses),
// and tokens at 0, 1, math.MaxInt64 and above, on every dialect. A refused
// argument is an *ArgError named after it, and leaves no row behind.
func TestHostileInputSQL(t *testing.T) {
	eachDialect(t, func(t *testing.T, s sqlStore) {
		ctx := testCtx(t)
		f := newFence(t, s, "")
		var nilDB *sql.DB
		bounds.WantArg(t, f.CreateTable(bounds.NilContext, s.db), "ctx")
		bounds.WantArg(t, f.CreateTable(ctx, nil), "db")
		bounds.WantArg(t, f.Check(bounds.NilContext, s.db, "r", 1), "ctx")
		bounds.WantArg(t, f.Check(ctx, nil, "r", 1), "q")
		bounds.WantArg(t, f.Check(ctx, nilDB, "r", 1), "q")
		_, err := f.Highest(bounds.NilContext, s.db, "r")
		bounds.WantArg(t, err, "ctx")
		_, err = f.Highest(ctx, nil, "r")
		bounds.WantArg(t, err, "q")
		u := fence.Update{Table: "t", Set: map[string]any{"v": 1}, Where: map[string]any{"id": 1}}
		bounds.WantArg(t, f.Update(bounds.NilContext, s.db, u, 1), "ctx")
		bounds.WantArg(t, f.Update(ctx, nil, u, 1), "q")

		for _, r := range []string{"a\x00b", "\xff", "caf\xe9"} {
			bounds.WantArg(t, f.Check(ctx, s.db, r, 1), "resource")
			_, err := f.Highest(ctx, s.db, r)
			bounds.WantArg(t, err, "resource")
		}
		for _, tok := range []uint64{0, math.MaxInt64 + 1, math.MaxUint64} {
			bounds.WantArg(t, f.Check(ctx, s.db, "r", tok), "token")
		}
		if n := count(t, s, fence.DefaultTable); n != 0 {
			t.Errorf("the fence table has %d rows after refused arguments", n)
		}
		for _, tok := range []uint64{1, math.MaxInt64} {
			if err := f.Check(ctx, s.db, "r", tok); err != nil {
				t.Errorf("Check with token %d: %v", tok, err)
			}
		}
	})
}

// TestHostileInputRedis: a Redis guard made with a nil client, nil
// contexts, and TTLs at 0, -1 and math.MaxInt64: each refusal is an
// *ArgError named after the argument (NewRedis(nil).Set panicked).
func TestHostileInputRedis(t *testing.T) {
	ctx := testCtx(t)
	c, p := newRedis(t)
	for _, f := range []*fence.Redis{fence.NewRedis(nil), fence.NewRedis((*redis.Client)(nil))} {
		bounds.WantArg(t, f.Set(ctx, p+"k", "v", 1, 0), "client")
		_, _, err := f.Get(ctx, p+"k")
		bounds.WantArg(t, err, "client")
	}
	f := fence.NewRedis(c)
	bounds.WantArg(t, f.Set(bounds.NilContext, p+"k", "v", 1, 0), "ctx")
	_, _, err := f.Get(bounds.NilContext, p+"k")
	bounds.WantArg(t, err, "ctx")
	bounds.WantArg(t, f.Set(ctx, p+"k", "v", 1, -1), "ttl")
	if n, err := c.Exists(ctx, p+"k").Result(); err != nil || n != 0 {
		t.Errorf("the key exists (%d, %v) after refused arguments", n, err)
	}
	for _, ttl := range []time.Duration{0, math.MaxInt64} {
		if err := f.Set(ctx, p+"k", "v", 1, ttl); err != nil {
			t.Errorf("Set with ttl %v: %v", ttl, err)
		}
	}
}
