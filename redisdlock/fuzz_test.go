package redisdlock

import (
	"strings"
	"testing"
)

// FuzzEscapeKey checks the key encoding inside hash tags: no brace
// survives escaping, unescaping reverses it and rejects what it cannot have
// made, and prefixes are kept (List and ForceRelease scan by prefix).
func FuzzEscapeKey(f *testing.F) {
	for _, s := range []string{"a", "%", "{a}", "}{", "%7B", "a{b}c", "%25%7D", "\x00\xff"} {
		f.Add(s, uint8(1))
	}
	f.Fuzz(func(t *testing.T, key string, cut uint8) {
		esc := escapeKey(key)
		if strings.ContainsAny(esc, "{}") {
			t.Fatalf("escapeKey(%q) = %q: a brace survives", key, esc)
		}
		if got, ok := unescapeKey(esc); !ok || got != key {
			t.Fatalf("unescapeKey(escapeKey(%q)) = %q, %v", key, got, ok)
		}
		if k, ok := unescapeKey(key); ok && escapeKey(k) != key {
			t.Fatalf("unescapeKey(%q) = %q, which escapes to %q", key, k, escapeKey(k))
		}
		p := key[:int(cut)%(len(key)+1)]
		if !strings.HasPrefix(esc, escapeKey(p)) {
			t.Fatalf("escapeKey(%q) = %q does not start with escapeKey(%q) = %q", key, esc, p, escapeKey(p))
		}
		if tag, ok := userTag(key); ok && slot(key) != slot("{"+tag+"}") {
			t.Fatalf("key %q hashes apart from its tag %q", key, tag)
		}
	})
}
