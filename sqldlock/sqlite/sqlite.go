// Package sqlite registers sqldlock's SQLite dialect: importing it,
//
//	import _ "github.com/dlockhq/dlock/sqldlock/sqlite"
//
// registers the sqlite: URL scheme with dlock.Open (and so the default store
// of dlock.OpenDefault) and lets sqldlock.New take a *sql.DB with
// sqldlock.SQLite. It compiles in modernc.org/sqlite (and its database/sql
// driver "sqlite"), which opens the database files of URLs and names
// SQLite's result codes; it compiles no other database driver. The URL's
// form and parameters are described in package sqldlock.
package sqlite

import (
	"github.com/dlockhq/dlock/internal/sqldialect"
	_ "github.com/dlockhq/dlock/sqldlock" // opens the drivers of the URLs
	"github.com/dlockhq/dlock/sqldlock/internal/sqlitesupport"
)

func init() { sqldialect.Register(sqlitesupport.Support) }
