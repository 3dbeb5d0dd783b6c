// Package integration holds the tests of package dlock that run on stores
// other than the in-process one (SQLite, PostgreSQL, MariaDB, Redis,
// memcached): hold IDs across processes on every store, the default store,
// hostile input on each kind of lease clock, and the wording of errors
// through a backend. Its subdirectories hold the same kind of tests of the
// recipes job, leader, fill and ratelimit, of package fence (its guards
// on SQL databases and Redis, and the examples of its SQL guards, which run
// on SQLite), and of package sqldlock on each of its dialects (its
// examples among them).
//
// They live here rather than beside the packages they test because `go mod
// tidy` in a program loads the tests of the packages the program imports:
// tests of package dlock that imported every backend made a program that
// uses one store download the client libraries of all of them. No program
// imports these packages, so their tests cost a consumer nothing.
package integration
