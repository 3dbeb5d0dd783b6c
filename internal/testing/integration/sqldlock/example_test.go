package sqldlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/sqldlock"
	_ "github.com/dlockhq/dlock/sqldlock/sqlite" // the sqlite dialect and its "sqlite" database/sql driver
)

// tempDB opens a SQLite database in a new temporary directory, the way an
// application opens its own.
func tempDB() (db *sql.DB, path string, cleanup func()) {
	dir, err := os.MkdirTemp("", "sqldlock-example-")
	if err != nil {
		log.Fatal(err)
	}
	path = filepath.Join(dir, "app.db")
	db, err = sql.Open("sqlite", path+"?_busy_timeout=10000&_journal_mode=WAL&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	return db, path, func() { db.Close(); os.RemoveAll(dir) }
}

// Locks in a database the application already uses: wrap its *sql.DB with
// New and give the driver to dlock.New.
func Example() {
	db, _, cleanup := tempDB()
	defer cleanup()
	ctx := context.Background()

	d, err := sqldlock.New(db, sqldlock.SQLite)
	if err != nil {
		log.Fatal(err)
	}
	c, err := dlock.New(d) // c.Close closes d, not db
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	err = c.Do(ctx, "report:nightly", func(ctx context.Context, l *dlock.Lock) error {
		fmt.Println("writing the report with token", l.Token())
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	l, err := c.TryLock(ctx, "report:nightly")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("next holder's token:", l.Token())
	if err := l.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// writing the report with token 1
	// next holder's token: 2
}

// Opening by URL: the driver opens (and owns) the database. Processes on one
// host that open the same file share its locks.
func Example_openURL() {
	_, path, cleanup := tempDB()
	defer cleanup()
	ctx := context.Background()

	a, err := dlock.Open(ctx, "sqlite://"+path+"?table=locks")
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	b, err := dlock.Open(ctx, "sqlite://"+path+"?table=locks")
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	l, err := a.Lock(ctx, "job:cleanup")
	if err != nil {
		log.Fatal(err)
	}
	_, err = b.TryLock(ctx, "job:cleanup")
	fmt.Println("second client:", errors.Is(err, dlock.ErrNotAcquired))
	hs, err := b.List(ctx, "job:")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held:", hs[0].Key, "token", hs[0].Token)
	if err := l.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// second client: true
	// held: job:cleanup token 1
}

// Optimistic concurrency on a versioned row: the update succeeds only at
// the version that was read.
func ExampleVersioned_Update() {
	db, _, cleanup := tempDB()
	defer cleanup()
	ctx := context.Background()
	for _, q := range []string{
		`CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL, version INTEGER NOT NULL)`,
		`INSERT INTO accounts VALUES (42, 100, 1)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			log.Fatal(err)
		}
	}
	accounts := sqldlock.Versioned{Table: "accounts", IDColumn: "id", VersionColumn: "version", Dialect: sqldlock.SQLite}

	// Two clients read the row at version 1; the first one to write wins.
	v, err := accounts.Update(ctx, db, 42, 1, map[string]any{"balance": 90})
	fmt.Println("first writer:", v, err)
	_, err = accounts.Update(ctx, db, 42, 1, map[string]any{"balance": 80})
	fmt.Println("second writer conflicts:", errors.Is(err, sqldlock.ErrConflict))

	// The loser reads again and retries at the new version.
	var balance, version int64
	if err := db.QueryRowContext(ctx, `SELECT balance, version FROM accounts WHERE id = 42`).Scan(&balance, &version); err != nil {
		log.Fatal(err)
	}
	v, err = accounts.Update(ctx, db, 42, version, map[string]any{"balance": balance - 10})
	fmt.Println("retry:", v, err)
	// Output:
	// first writer: 2 <nil>
	// second writer conflicts: true
	// retry: 3 <nil>
}

// Task allocation: workers claim free rows of a table; no row is handed out
// twice.
func ExampleClaim_One() {
	db, _, cleanup := tempDB()
	defer cleanup()
	ctx := context.Background()
	for _, q := range []string{
		`CREATE TABLE tasks (id INTEGER PRIMARY KEY, state INTEGER NOT NULL)`,
		`INSERT INTO tasks VALUES (1, 1), (2, 1), (3, 1), (4, 2)`, // 1 = free, 2 = taken
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			log.Fatal(err)
		}
	}
	tasks := sqldlock.Claim[int64]{Table: "tasks", IDColumn: "id", StateColumn: "state", Free: 1, Taken: 2, Dialect: sqldlock.SQLite}

	var got []int64
	for {
		id, err := tasks.One(ctx, db)
		if errors.Is(err, sqldlock.ErrNoneFree) {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		got = append(got, id)
	}
	slices.Sort(got) // claimed in random order
	fmt.Println("claimed:", got)
	// Output:
	// claimed: [1 2 3]
}

// ID ranges: several servers take blocks of IDs from one counter row, each
// block exactly once, without holding a lock while they use it. A server
// reads the row, claims the next block with a versioned update, and reads
// again after a conflict (another server took that block first).
func ExampleVersioned_Update_idRanges() {
	db, _, cleanup := tempDB()
	defer cleanup()
	ctx := context.Background()
	for _, q := range []string{
		`CREATE TABLE sequences (name TEXT PRIMARY KEY, next_id INTEGER NOT NULL, version INTEGER NOT NULL)`,
		`INSERT INTO sequences VALUES ('order_id', 1000, 1)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			log.Fatal(err)
		}
	}
	sequences := sqldlock.Versioned{Table: "sequences", IDColumn: "name", VersionColumn: "version", Dialect: sqldlock.SQLite}

	// nextBlock claims the next n IDs: [first, first+n).
	nextBlock := func(n int64) (first int64, err error) {
		for {
			var version int64
			if err := db.QueryRowContext(ctx, `SELECT next_id, version FROM sequences WHERE name = 'order_id'`).Scan(&first, &version); err != nil {
				return 0, err
			}
			_, err := sequences.Update(ctx, db, "order_id", version, map[string]any{"next_id": first + n})
			if !errors.Is(err, sqldlock.ErrConflict) {
				return first, err
			}
		}
	}
	for range 3 {
		first, err := nextBlock(100)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("IDs %d to %d\n", first, first+99)
	}
	// Output:
	// IDs 1000 to 1099
	// IDs 1100 to 1199
	// IDs 1200 to 1299
}
