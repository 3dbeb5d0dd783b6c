package urlutil

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
)

func TestHosts(t *testing.T) {
	for raw, want := range map[string][]string{
		"x://a:1,b,,c:3": {"a:1", "b:9", "c:3"},
		"x://[::1]:7":    {"[::1]:7"},
		"x:///path":      nil,
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Hosts(u, "9")
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("Hosts(%s) = %v, %v; want %v", raw, got, err, want)
		}
	}
	u, err := url.Parse("x://user:secret@a:1,:5")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Hosts(u, "9")
	var ae *dlock.ArgError
	if !errors.As(err, &ae) || ae.Name != "url" || strings.Contains(err.Error(), "secret") {
		t.Errorf("Hosts with a bad address = %v; want a redacted ArgError for url", err)
	}
}

func TestParams(t *testing.T) {
	var (
		d    time.Duration
		zero = time.Second
		kind = 1
	)
	parse := map[string]func(string) string{
		"d":    Duration(&d, time.Millisecond, "1s"),
		"zero": Duration(&zero, 0, "0, 1s"),
		"kind": OneOf(&kind, "a kind", map[string]int{"one": 1, "two": 2}),
	}
	for raw, want := range map[string]string{
		"x://h?d=1s&d=3s&zero=0&kind=two": "",
		"x://h?d=0":                       `d="0" is not a positive duration (write 1s)`,
		"x://h?d=soon":                    `d="soon" is not a positive duration (write 1s)`,
		"x://h?zero=-1s":                  `zero="-1s" is not a duration of zero or more (write 0, 1s)`,
		"x://h?kind=three":                `kind="three" is not a kind (write one or two)`,
		"x://user:secret@h?nope=1":        `unknown parameter "nope" (x URLs take d, zero and kind)`,
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		err = Params(u, u.Query(), parse, "x URLs take d, zero and kind")
		var ae *dlock.ArgError
		switch {
		case want == "" && (err != nil || d != 3*time.Second || zero != 0 || kind != 2):
			t.Errorf("Params(%s) = %v, set d %v, zero %v, kind %d; want 3s (the last value), 0, 2", raw, err, d, zero, kind)
		case want != "" && (!errors.As(err, &ae) || ae.Reason != want || strings.Contains(err.Error(), "secret")):
			t.Errorf("Params(%s) = %v; want a redacted ArgError: %s", raw, err, want)
		}
	}
}

func TestServersNoPath(t *testing.T) {
	u, err := url.Parse("x://user:secret@/path")
	if err != nil {
		t.Fatal(err)
	}
	var ae *dlock.ArgError
	if _, err := Servers(u, "9"); !errors.As(err, &ae) || !strings.Contains(err.Error(), "names no server") || strings.Contains(err.Error(), "secret") {
		t.Errorf("Servers of a URL without hosts = %v; want a redacted ArgError that says it names no server", err)
	}
	if err := NoPath(u, "x://host"); !errors.As(err, &ae) || !strings.Contains(err.Error(), `"/path"`) || !strings.Contains(err.Error(), "x://host") {
		t.Errorf("NoPath = %v; want an ArgError naming the path and the form", err)
	}
	if err := NoPath(&url.URL{Scheme: "x", Host: "h", Path: "/"}, "x://host"); err != nil {
		t.Errorf("NoPath of a URL with path / = %v; want nil", err)
	}
}
