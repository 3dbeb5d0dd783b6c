package sqldlock

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/dlockhq/dlock"
)

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func configOf(opts []Option) config {
	c := config{table: DefaultTable}
	for _, o := range opts {
		o(&c)
	}
	return c
}

func tableOf(opts []Option) string { return configOf(opts).table }

func fairOf(opts []Option) bool { return configOf(opts).fair }

// TestURLOptions checks the dlock parameters that every scheme's URL
// takes: table names the table; fair=1 (or true) makes the driver fair,
// fair=0 (or false, or no parameter) does not; other values are refused with
// an ArgError naming the URL; and neither is passed on to the database
// driver.
func TestURLOptions(t *testing.T) {
	for _, base := range []string{"sqlite:///tmp/x.db", "postgres://h/db?sslmode=disable", "mysql://u@h/db"} {
		sep := "?"
		if strings.Contains(base, "?") {
			sep = "&"
		}
		for _, tc := range []struct {
			query string
			fair  bool
			table string
		}{
			{"", false, DefaultTable}, {"fair=1", true, DefaultTable}, {"fair=true", true, DefaultTable},
			{"fair=0", false, DefaultTable}, {"fair=false", false, DefaultTable}, {"table=jobs&fair=1", true, "jobs"},
			{"table=jobs", false, "jobs"},
		} {
			raw := base
			if tc.query != "" {
				raw += sep + tc.query
			}
			u := mustParse(t, raw)
			q := u.Query()
			opts, err := takeOptions(u, q)
			if err != nil || fairOf(opts) != tc.fair || tableOf(opts) != tc.table {
				t.Errorf("%s: fair %v, table %q, %v; want %v, %q", raw, fairOf(opts), tableOf(opts), err, tc.fair, tc.table)
			}
			if q.Has(paramFair) || q.Has(paramTable) {
				t.Errorf("%s: passed on: %s", raw, q.Encode())
			}
		}
		for _, bad := range []string{"fair=yes", "fair=", "fair=2"} {
			u := mustParse(t, base+sep+bad)
			_, err := takeOptions(u, u.Query())
			var ae *dlock.ArgError
			if !errors.As(err, &ae) || ae.Name != "url" || !strings.Contains(err.Error(), "fair") {
				t.Errorf("%s%s%s: err = %v; want an ArgError naming the url and fair", base, sep, bad, err)
			}
		}
	}
}

func TestInfo(t *testing.T) {
	for in, want := range map[string]string{
		"host:42":     "host:42",
		"a\x00b":      "ab",
		"bad\xffutf8": "bad\uFFFDutf8",
	} {
		if got := cleanInfo(in); got != want {
			t.Errorf("cleanInfo(%q) = %q; want %q", in, got, want)
		}
	}
	long := "x" + strings.Repeat("é", maxInfoLen) // é is 2 bytes
	got := cleanInfo(long)
	if len(got) != maxInfoLen-1 || got != long[:maxInfoLen-1] {
		t.Errorf("cleanInfo of %d bytes = %d bytes; want %d, cut before a rune", len(long), len(got), maxInfoLen-1)
	}
}

func TestPrefixHelpers(t *testing.T) {
	for in, want := range map[string]string{"": "%", "a": "a%", "a_b%c!": "a!_b!%c!!%"} {
		if got := likePrefix(in); got != want {
			t.Errorf("likePrefix(%q) = %q; want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{"a": "b", "ab\xff": "ac", "a\xff\xff": "b"} {
		if got, ok := prefixEnd(in); !ok || got != want {
			t.Errorf("prefixEnd(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "\xff\xff"} {
		if _, ok := prefixEnd(in); ok {
			t.Errorf("prefixEnd(%q) has an end", in)
		}
	}
}
