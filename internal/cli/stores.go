package cli

// The stores the dlock command can use, registered by URL scheme.
import (
	_ "github.com/dlockhq/dlock/sqldlock" // sqlite, postgres, postgresql, mysql
)
