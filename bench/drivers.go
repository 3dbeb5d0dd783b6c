package main

// The dlock backends of the consensus stores, opened by URL (etcd://,
// zk://) in dlockURLOpener.
import (
	_ "github.com/dlockhq/dlock/etcddlock"
	_ "github.com/dlockhq/dlock/zkdlock"
)
