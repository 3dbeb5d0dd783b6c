// Package mysql registers sqldlock's MySQL and MariaDB dialect: importing it,
//
//	import _ "github.com/dlockhq/dlock/sqldlock/mysql"
//
// registers the mysql:// URL scheme with dlock.Open and lets sqldlock.New
// take a *sql.DB with sqldlock.MySQL. It compiles in
// github.com/go-sql-driver/mysql (and its database/sql driver "mysql"),
// which opens the databases of URLs and names the server's errors; it
// compiles no other database driver. The URL's form and parameters are
// described in package sqldlock.
package mysql

import (
	"github.com/dlockhq/dlock/internal/sqldialect"
	_ "github.com/dlockhq/dlock/sqldlock" // opens the drivers of the URLs
	"github.com/dlockhq/dlock/sqldlock/internal/mysqlsupport"
)

func init() { sqldialect.Register(mysqlsupport.Support) }
