// Package postgres registers sqldlock's PostgreSQL dialect: importing it,
//
//	import _ "github.com/dlockhq/dlock/sqldlock/postgres"
//
// registers the postgres:// and postgresql:// URL schemes with dlock.Open
// and lets sqldlock.New take a *sql.DB with sqldlock.Postgres. It compiles in
// pgx (github.com/jackc/pgx/v5, whose database/sql driver "pgx" it
// registers), which opens the databases of URLs, names the server's errors
// and carries the release notifications (LISTEN/NOTIFY) that wake waiters;
// it compiles no other database driver. The URL's form and parameters are
// described in package sqldlock.
package postgres

import (
	"github.com/dlockhq/dlock/internal/sqldialect"
	_ "github.com/dlockhq/dlock/sqldlock" // opens the drivers of the URLs
	"github.com/dlockhq/dlock/sqldlock/internal/pgsupport"
)

func init() { sqldialect.Register(pgsupport.Support) }
