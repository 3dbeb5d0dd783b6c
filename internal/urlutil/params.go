package urlutil

import (
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Params parses the parameters left in q, the query of u, with the parsers
// of parse, by name: each is given its parameter's last value and returns
// why it refuses it ("is not ..."), or "". A parameter without a parser is
// an Error naming the parameters the URL takes, as takes lists them.
func Params(u *url.URL, q url.Values, parse map[string]func(v string) string, takes string) error {
	for k, vs := range q {
		f, ok := parse[k]
		if !ok {
			return Error(u, "unknown parameter %q (%s)", k, takes)
		}
		if why := f(vs[len(vs)-1]); why != "" {
			return Error(u, "%s=%q %s", k, vs[len(vs)-1], why)
		}
	}
	return nil
}

// Duration returns a parser for Params that sets *d to a Go duration of
// at least least, and names examples of the duration it refuses.
func Duration(d *time.Duration, least time.Duration, examples string) func(string) string {
	return func(v string) string {
		x, err := time.ParseDuration(v)
		switch {
		case err == nil && x >= least:
			*d = x
			return ""
		case least > 0:
			return "is not a positive duration (write " + examples + ")"
		}
		return "is not a duration of zero or more (write " + examples + ")"
	}
}

// OneOf returns a parser for Params that sets *dst to the choice the value
// names, and names what it refuses as what.
func OneOf[T any](dst *T, what string, choices map[string]T) func(string) string {
	return func(v string) string {
		x, ok := choices[v]
		if !ok {
			return "is not " + what + " (write " + strings.Join(slices.Sorted(maps.Keys(choices)), " or ") + ")"
		}
		*dst = x
		return ""
	}
}
