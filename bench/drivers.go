package main

// The dlock backends opened by URL: the consensus stores (etcd://, zk://,
// nats://) in dlockURLOpener, PostgreSQL (postgres://) in dlockPgOpen.
import (
	_ "github.com/dlockhq/dlock/etcddlock"
	_ "github.com/dlockhq/dlock/natsdlock"
	_ "github.com/dlockhq/dlock/sqldlock/postgres"
	_ "github.com/dlockhq/dlock/zkdlock"
)
