package cli

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/redact"
)

// urlToken matches what looks like a URL in a message: a scheme, "://" and
// everything up to a space, a quote or an angle bracket.
var urlToken = regexp.MustCompile("[A-Za-z][A-Za-z0-9+.-]*://[^\\s\"'`<>]+")

// redactURLs masks the secrets of every URL in the text s (see
// internal/redact). It is the last line of defence: the store URL dlock
// shows is redacted where it is shown, but an error from a library may quote
// it as it was given.
func redactURLs(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return urlToken.ReplaceAllStringFunc(s, func(tok string) string {
		// A URL quoted in running text is often followed by punctuation
		// ("open URL: cause"): keep it out of the URL, or a masked last
		// parameter would swallow it.
		trimmed := strings.TrimRight(tok, ":;,.")
		return redact.String(trimmed) + tok[len(trimmed):]
	})
}

// redactingWriter writes dlock's own diagnostics (its messages, the
// --verbose log, cobra's usage errors) with redactURLs applied. Each of them
// is written in one call, so no URL is split between two writes. The
// command run by `dlock run` writes to the real stderr, untouched.
type redactingWriter struct{ w io.Writer }

func (r redactingWriter) Write(p []byte) (int, error) {
	s := string(p)
	if red := redactURLs(s); red != s {
		if _, err := io.WriteString(r.w, red); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return r.w.Write(p)
}

// checkStoreURL rejects a store URL that does not parse or has no scheme
// before it reaches dlock.Open, whose error would quote it in full. The
// message names where the URL came from (source: --url or $DLOCK_URL) and
// shows it through redact.String, or not at all when that cannot be done
// safely or it is not a URL (a "host=... password=..." connection string).
func checkStoreURL(raw, source string) error {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // *url.Error repeats the URL in full
		}
		shown := "(not shown)"
		if r := redact.String(raw); !strings.HasPrefix(r, "(") {
			shown = strconv.Quote(r)
		}
		hint := ""
		if strings.Contains(err.Error(), "first path segment in URL cannot contain colon") {
			hint = fmt.Sprintf(" (a URL begins with its store's scheme: write, say, redis://%s)", redact.String(raw))
		}
		return usagef("invalid %s %s: does not parse: %v%s", source, shown, err, hint)
	}
	if u.Scheme == "" {
		return usagef("invalid %s (not shown): it has no scheme; give a URL such as postgres://host/db (known schemes: %s)",
			source, strings.Join(dlock.Schemes(), ", "))
	}
	return nil
}
