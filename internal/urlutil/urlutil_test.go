package urlutil

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"

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
