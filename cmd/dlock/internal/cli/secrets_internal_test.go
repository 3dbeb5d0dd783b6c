package cli

import (
	"strings"
	"testing"
)

// TestRedactURLs checks the last line of defence against secrets in
// messages: every URL in a text is shown through internal/redact.
func TestRedactURLs(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`parse "postgres://u:s3cret@[::1/x": missing ']' in host`, `parse "xxxxx@[::1/x": missing ']' in host`},
		{`open postgres://h:1/x?password=s3cret&sslmode=disable: refused`, `open postgres://h:1/x?password=xxxxx&sslmode=disable: refused`},
		{`a redis+sentinel://h/m?sentinel_password=s3cret b mysql://u:s3cret@h/x`, `a redis+sentinel://h/m?sentinel_password=xxxxx b mysql://u:xxxxx@h/x`},
		{`lock "k" key=job token=7 sqlite:///var/lib/a%20b/x%3F.db`, `lock "k" key=job token=7 sqlite:///var/lib/a%20b/x%3F.db`},
		{`no URL: password=s3cret`, `no URL: password=s3cret`}, // not a URL: left alone
		// Punctuation after a URL is not part of it, even after a masked
		// last parameter.
		{`open etcd://h:1?cacert=/c.pem&key=/k.pem: untrusted`, `open etcd://h:1?cacert=/c.pem&key=xxxxx: untrusted`},
		{`at redis://u:s3cret@[::1]:6379, then mysql://u:s3cret@[::1].`, `at redis://u:xxxxx@[::1]:6379, then mysql://u:xxxxx@[::1].`},
	} {
		if got := redactURLs(tt.in); got != tt.want {
			t.Errorf("redactURLs(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	var b strings.Builder
	w := redactingWriter{&b}
	msg := "dlock: cannot open postgres://h/x?password=s3cret\n"
	if n, err := w.Write([]byte(msg)); n != len(msg) || err != nil || strings.Contains(b.String(), "s3cret") {
		t.Errorf("Write: %d, %v, wrote %q", n, err, b.String())
	}
}
