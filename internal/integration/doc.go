// Package integration holds the tests of package dlock that run on stores
// other than the in-process one (SQLite, PostgreSQL, MariaDB, Redis,
// memcached), or that need more of the repository than package dlock and
// memdlock: hold IDs across processes on every store, the default store,
// hostile input on each kind of lease clock, and the wording of errors
// through the recipes and a backend.
//
// They live here rather than beside package dlock because `go mod tidy`
// in a program loads the tests of the packages the program imports: tests
// of package dlock that imported every backend made a program that uses one
// store download the client libraries of all of them. No program imports
// this package, so its tests cost a consumer nothing.
package integration
