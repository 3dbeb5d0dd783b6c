package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/fence"
	"github.com/dlockhq/dlock/memdlock"
)

// exampleDB opens an in-memory SQLite database, the application's own.
func exampleDB() *sql.DB {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		log.Fatal(err)
	}
	db.SetMaxOpenConns(1) // every connection to :memory: is a database of its own
	return db
}

// A payment is made under a lock on the buyer's phone number. Buyer A takes
// the lock, then pauses past its lease; buyer B takes the lock and pays. When
// A wakes up and pays too, the fence table refuses its older token, and the
// payment is made once.
func ExampleSQL_Check() {
	ctx := context.Background()
	client, err := dlock.New(memdlock.New()) // in production, a store with durable tokens
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	db := exampleDB()
	defer db.Close()

	f, err := fence.NewSQL(fence.SQLite, "") // the table dlock_fence
	if err != nil {
		log.Fatal(err)
	}
	if err := f.CreateTable(ctx, db); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE payments (phone TEXT, amount INTEGER, token INTEGER)`); err != nil {
		log.Fatal(err)
	}

	// pay records a payment if the lock's token is still the newest.
	pay := func(phone string, token uint64) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := f.Check(ctx, tx, "phone:"+phone, token); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO payments VALUES (?, ?, ?)`, phone, 100, token); err != nil {
			return err
		}
		return tx.Commit()
	}

	const phone = "13800000000"
	a, err := client.Lock(ctx, "phone:"+phone, dlock.WithTTL(50*time.Millisecond), dlock.WithoutRenewal())
	if err != nil {
		log.Fatal(err)
	}
	<-a.Done() // A pauses past its lease

	b, err := client.Lock(ctx, "phone:"+phone)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("buyer B pays with token", b.Token(), "->", pay(phone, b.Token()))
	b.Release(ctx)

	err = pay(phone, a.Token()) // A wakes up
	fmt.Println("buyer A pays with token", a.Token(), "->", err)
	fmt.Println("stale:", errors.Is(err, fence.ErrStaleToken))

	var n int
	db.QueryRowContext(ctx, `SELECT count(*) FROM payments`).Scan(&n)
	fmt.Println("payments:", n)
	// Output:
	// buyer B pays with token 2 -> <nil>
	// buyer A pays with token 1 -> fence: stale token 1 for "phone:13800000000": token 2 was accepted
	// stale: true
	// payments: 1
}

// The last item in stock is sold under a lock on the item. Seller A reads
// the stock, then pauses past its lease; seller B takes the lock, reads the
// same stock and sells the item. A's late write of the same decrement
// carries an older token than the row's, and is refused: the item is not
// sold twice.
func ExampleSQL_Update() {
	ctx := context.Background()
	client, err := dlock.New(memdlock.New())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	db := exampleDB()
	defer db.Close()

	f, err := fence.NewSQL(fence.SQLite, "")
	if err != nil {
		log.Fatal(err)
	}
	_, err = db.ExecContext(ctx, `CREATE TABLE stock (sku TEXT PRIMARY KEY, qty INTEGER NOT NULL, fence_token INTEGER NOT NULL DEFAULT 0)`)
	if err != nil {
		log.Fatal(err)
	}
	db.ExecContext(ctx, `INSERT INTO stock (sku, qty) VALUES ('sku-1', 1)`)

	readQty := func() (qty int) {
		db.QueryRowContext(ctx, `SELECT qty FROM stock WHERE sku = 'sku-1'`).Scan(&qty)
		return qty
	}
	// sell writes the stock after a sale, guarded by the seller's token.
	sell := func(qty int, token uint64) error {
		return f.Update(ctx, db, fence.Update{
			Table: "stock",
			Set:   map[string]any{"qty": qty - 1},
			Where: map[string]any{"sku": "sku-1"},
		}, token)
	}

	a, err := client.Lock(ctx, "sku-1", dlock.WithTTL(50*time.Millisecond), dlock.WithoutRenewal())
	if err != nil {
		log.Fatal(err)
	}
	qtyA := readQty()
	<-a.Done() // A pauses past its lease

	b, err := client.Lock(ctx, "sku-1")
	if err != nil {
		log.Fatal(err)
	}
	qtyB := readQty()
	fmt.Println("B sells 1 of", qtyB, "->", sell(qtyB, b.Token()))
	b.Release(ctx)

	err = sell(qtyA, a.Token()) // A wakes up
	fmt.Println("A sells 1 of", qtyA, "->", err)
	fmt.Println("left in stock:", readQty())
	// Output:
	// B sells 1 of 1 -> <nil>
	// A sells 1 of 1 -> fence: stale token 1 for "stock sku=sku-1": token 2 was accepted
	// left in stock: 0
}
