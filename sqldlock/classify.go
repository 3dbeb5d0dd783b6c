package sqldlock

import (
	"errors"
	"slices"
	"strconv"
	"strings"
)

// Permanent implements driver.Classifier. A database's error is permanent
// when asking again cannot change the answer while the deployment stays as
// it is:
//
//   - PostgreSQL (by SQLSTATE): the password or the authorization was
//     refused (28P01, 28000), the database, schema, table or function is
//     missing (3D000, 3F000, 42P01, 42883), or the user lacks a privilege
//     (42501);
//   - MySQL and MariaDB (by error number): access was denied (1044, 1045,
//     1142, 1143, 1227, 1370, 1698), the database, table or procedure is
//     missing (1049, 1146, 1305);
//   - SQLite: the database is read-only, cannot be opened, is not a
//     database or is corrupt, access was denied, or the table is missing;
//   - any dialect: the lock table holds another schema (*SchemaError).
//
// Serialization failures, deadlocks, lock timeouts, a busy SQLite file and
// broken connections are transient. The checks match the errors' codes
// through the methods of the drivers' error types (pgconn.PgError's
// SQLState, sqlite.Error's Code) and, on MySQL, through the dialect's
// registered support (package sqldlock/mysql), so that this package needs
// none of the database drivers.
func (d *Driver) Permanent(err error) bool { return permanent(err) }

func permanent(err error) bool {
	if errors.As(err, new(*SchemaError)) {
		return true
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) && slices.Contains(pgPermanent, pg.SQLState()) {
		return true
	}
	if n, err := strconv.Atoi(errCode(MySQL, err)); err == nil && slices.Contains(mysqlPermanent, n) {
		return true
	}
	var lite interface {
		error
		Code() int
	}
	if errors.As(err, &lite) {
		switch lite.Code() & 0xff {
		case sqliteError:
			return strings.Contains(lite.Error(), "no such table")
		case sqlitePerm, sqliteReadOnly, sqliteCorrupt, sqliteCantOpen, sqliteAuth, sqliteNotADB:
			return true
		}
	}
	return false
}

// pgPermanent are the SQLSTATEs of PostgreSQL's permanent errors.
var pgPermanent = []string{
	"28P01", // invalid_password
	"28000", // invalid_authorization_specification
	"3D000", // invalid_catalog_name: no such database
	"3F000", // invalid_schema_name
	"42P01", // undefined_table
	"42883", // undefined_function
	"42501", // insufficient_privilege
}

// mysqlPermanent are the numbers of MySQL's and MariaDB's permanent errors.
var mysqlPermanent = []int{
	1044, // ER_DBACCESS_DENIED_ERROR
	1045, // ER_ACCESS_DENIED_ERROR: wrong user or password
	1049, // ER_BAD_DB_ERROR: unknown database
	1142, // ER_TABLEACCESS_DENIED_ERROR
	1143, // ER_COLUMNACCESS_DENIED_ERROR
	1146, // ER_NO_SUCH_TABLE
	1227, // ER_SPECIFIC_ACCESS_DENIED_ERROR
	1305, // ER_SP_DOES_NOT_EXIST: a stored procedure is missing
	1370, // ER_PROCACCESS_DENIED_ERROR
	1698, // ER_ACCESS_DENIED_NO_PASSWORD_ERROR
}

// SQLite's primary result codes (https://sqlite.org/rescode.html).
const (
	sqliteError    = 1
	sqlitePerm     = 3
	sqliteReadOnly = 8
	sqliteCorrupt  = 11
	sqliteCantOpen = 14
	sqliteAuth     = 23
	sqliteNotADB   = 26
)
