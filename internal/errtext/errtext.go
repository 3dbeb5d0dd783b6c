// Package errtext keeps the texts of dlock's errors to one rule, shared by
// package dlock, the recipes and the command line: a message begins with
// "dlock: " at most once and names the lock's key once, however many
// layers wrapped it. An error that wraps another error of dlock's drops the
// inner one's prefix (Bare); one that wraps an error naming the key names
// it only if that error does not (Keyed).
package errtext

import (
	"strconv"
	"strings"
)

// Prefix begins the messages of dlock's errors.
const Prefix = "dlock: "

// bareError is an error of dlock's without its Prefix, to be wrapped by
// another one.
type bareError struct{ err error }

func (e *bareError) Error() string { return strings.TrimPrefix(e.err.Error(), Prefix) }
func (e *bareError) Unwrap() error { return e.err }

// Bare returns err with its message's Prefix dropped, for wrapping in
// another error that says "dlock: " itself, or that belongs to another
// package; errors.Is and errors.As see through it.
func Bare(err error) error {
	if err == nil || !strings.HasPrefix(err.Error(), Prefix) {
		return err
	}
	return &bareError{err}
}

// Keyed returns key quoted, after a space, for a message that wraps err,
// or "" if err's message names the key already.
func Keyed(key string, err error) string {
	q := strconv.Quote(key)
	if err != nil && strings.Contains(err.Error(), q) {
		return ""
	}
	return " " + q
}

// KeyedAfter is Keyed for a message that names the key after a sentinel's
// text and a colon: it returns `: "KEY"`, or "".
func KeyedAfter(key string, err error) string {
	if k := Keyed(key, err); k != "" {
		return ":" + k
	}
	return ""
}
