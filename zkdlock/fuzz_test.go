package zkdlock

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// FuzzEscape checks that every key maps to one valid znode name that maps
// back to it, and that unescape accepts only names escape makes.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"a", ".", "..", "a/b", "%", "%2F", "lock-", "\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if k, ok := unescape(key); ok && escape(k) != key {
			t.Fatalf("unescape(%q) = %q, which escapes to %q", key, k, escape(k))
		}
		if key == "" {
			return // not a dlock key
		}
		name := escape(key)
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
			t.Fatalf("escape(%q) = %q: not a valid znode name", key, name)
		}
		if got, ok := unescape(name); !ok || got != key {
			t.Fatalf("unescape(escape(%q)) = %q, %v", key, got, ok)
		}
	})
}

// FuzzParseNode checks that a contender's name parses back to the owner,
// mode and limit it was made for, in either layout, and that parsing any
// name never fails in a way that makes a contender of a non-sequential one.
func FuzzParseNode(f *testing.F) {
	f.Add("owner", uint8(0), 1, false, int64(7), "_c_x-lock-0000000001")
	f.Add("o", uint8(2), 3, true, int64(0), "__rlock__0000000002")
	f.Fuzz(func(t *testing.T, owner string, mode uint8, limit int, rw bool, seq int64, name string) {
		if n, ok := parseNode(name); ok && n.name != name {
			t.Fatalf("parseNode(%q).name = %q", name, n.name)
		}
		m := driver.Mode(mode % 3)
		if m != driver.Semaphore {
			limit = 0
		} else if limit < 1 {
			return
		}
		if seq < 0 || seq > 9999999999 {
			return
		}
		l := CuratorMutex
		if rw {
			l = CuratorReadWriteLock
		}
		full := nodeBase(owner, m, limit, l) + fmt.Sprintf("%0*d", seqLen, seq)
		n, ok := parseNode(full)
		if !ok || n.foreign || n.ownerID != dlock.OwnerID(owner) || n.mode != m || n.limit != limit || n.seq != seq {
			t.Fatalf("parseNode(%q) = %+v, %v; want owner %s, %s, limit %d, seq %d", full, n, ok, dlock.OwnerID(owner), m, limit, seq)
		}
	})
}
