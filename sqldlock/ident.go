package sqldlock

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dlockhq/dlock"
)

// maxIdentLen is the longest identifier the helpers accept: PostgreSQL's
// limit (MySQL allows 64, SQLite more).
const maxIdentLen = 63

// maxTableLen is the longest lock table name: the names derived from it
// (NAME_token_seq, NAME_acquire_v1, NAME_holds, NAME_seq, NAME_acq_multi_v1
// and the rest, see WithTable) must still fit in 63 bytes.
const maxTableLen = 48

// checkIdent reports whether s is a plain SQL identifier: an ASCII letter or
// underscore followed by ASCII letters, digits and underscores, at most max
// bytes. Plain identifiers need no escaping in any dialect; they are quoted
// all the same, so reserved words are safe too. The error is a
// *dlock.ArgError naming the argument and the bad value.
func checkIdent(what, s string, max int) error {
	reason := ""
	switch {
	case s == "":
		reason = "must not be empty"
	case len(s) > max:
		reason = "is longer than " + strconv.Itoa(max) + " bytes"
	default:
		for i := 0; i < len(s); i++ {
			c := s[i]
			letter := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
			if !letter && (i == 0 || c < '0' || c > '9') {
				reason = "is not a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*)"
				break
			}
		}
	}
	if reason == "" {
		return nil
	}
	return &dlock.ArgError{Name: what, Value: s, Reason: reason}
}

// quote quotes a checked identifier for the dialect.
func (d Dialect) quote(ident string) string {
	if d == MySQL {
		return "`" + ident + "`"
	}
	return `"` + ident + `"`
}

// placeholder returns the n-th (1-based) bind parameter marker.
func (d Dialect) placeholder(n int) string {
	if d == Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

func (d Dialect) check() error {
	switch d {
	case Postgres, MySQL, SQLite:
		return nil
	}
	return &dlock.ArgError{Name: "dialect", Value: d, Reason: "is not Postgres, MySQL or SQLite"}
}

// likePrefix returns a LIKE pattern (with ESCAPE '!') matching every string
// that starts with prefix. '!' is used as the escape character because a
// backslash is itself an escape in MySQL string literals.
func likePrefix(prefix string) string {
	var b strings.Builder
	for i := 0; i < len(prefix); i++ {
		switch c := prefix[i]; c {
		case '!', '%', '_':
			b.WriteByte('!')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('%')
	return b.String()
}

// prefixEnd returns the smallest byte string greater than every string that
// starts with prefix, and false when there is none (prefix is empty or all
// 0xFF bytes).
func prefixEnd(prefix string) (string, bool) {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xFF {
			b[i]++
			return string(b[:i+1]), true
		}
	}
	return "", false
}

func errorf(format string, args ...any) error {
	return fmt.Errorf("sqldlock: "+format, args...)
}
