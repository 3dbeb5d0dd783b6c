// Package urlutil holds the URL parsing that several backends' URL openers
// share.
package urlutil

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/redact"
)

// Error returns an *dlock.ArgError for the URL u (shown redacted).
func Error(u *url.URL, format string, args ...any) error {
	return &dlock.ArgError{Name: "url", Value: redact.URL(u), Reason: fmt.Sprintf(format, args...)}
}

// Hosts splits u.Host, a comma-separated list of host[:port], adding
// defaultPort where a port is missing. Empty entries are skipped; a list
// with no entry returns no hosts and no error, so that callers can say what
// they expected. A malformed address is an Error.
func Hosts(u *url.URL, defaultPort string) ([]string, error) {
	var hosts []string
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(h, defaultPort)
		}
		if host, port, err := net.SplitHostPort(h); err != nil || host == "" || port == "" {
			return nil, Error(u, "bad address %q", h)
		}
		hosts = append(hosts, h)
	}
	return hosts, nil
}

// Servers is Hosts for a URL that must name a server.
func Servers(u *url.URL, defaultPort string) ([]string, error) {
	hosts, err := Hosts(u, defaultPort)
	if err == nil && len(hosts) == 0 {
		err = Error(u, "names no server (no host:port)")
	}
	return hosts, err
}

// NoPath returns an Error if u has a path; form shows how to write the URL.
func NoPath(u *url.URL, form string) error {
	if strings.Trim(u.Path, "/") != "" {
		return Error(u, "has a path (%q); write %s", u.Path, form)
	}
	return nil
}
