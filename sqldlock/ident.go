package sqldlock

import (
	"strings"

	"github.com/dlockhq/dlock/internal/sqldialect"
)

// maxIdentLen is the longest identifier the helpers accept.
const maxIdentLen = sqldialect.MaxIdentLen

// maxTableLen is the longest lock table name: the names derived from it
// (NAME_token_seq, NAME_holds, NAME_release_multi and the rest, see
// WithTable) must still fit in 63 bytes.
const maxTableLen = 48

// checkIdent is sqldialect.CheckIdent.
var checkIdent = sqldialect.CheckIdent

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
