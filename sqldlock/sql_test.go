package sqldlock

import (
	"fmt"
	"testing"
)

// TestParseWaiter checks the waiter payloads of release notifications: the
// owner's length tells it from the key, whatever either holds, and other
// payloads (keys) are no waiter payloads.
func TestParseWaiter(t *testing.T) {
	for _, tc := range []struct{ key, owner string }{
		{"k", "OWNER"}, {"a:b", "o:1"}, {"", "x"}, {"12:k", ""}, {"\x01k", "o"},
	} {
		p := "\x01" + fmt.Sprint(len(tc.owner)) + ":" + tc.owner + tc.key
		if key, owner, ok := parseWaiter(p); !ok || key != tc.key || owner != tc.owner {
			t.Errorf("parseWaiter(%q) = %q, %q, %v; want %q, %q", p, key, owner, ok, tc.key, tc.owner)
		}
	}
	for _, p := range []string{"k", "", "\x01", "\x015", "\x01x:k", "\x019:abc", "\x01-1:k", "x\x011:ok"} {
		if key, owner, ok := parseWaiter(p); ok {
			t.Errorf("parseWaiter(%q) = %q, %q; want no waiter payload", p, key, owner)
		}
	}
}
