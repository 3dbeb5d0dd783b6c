// Package redact hides the secrets in store URLs before they are shown in an
// error, a log line or the CLI's output. Every URL dlock shows goes through
// it.
package redact

import (
	"net/url"
	"strings"
)

// Mask replaces a secret.
const Mask = "xxxxx"

// secretWords are the parts of a query parameter's name that mark its value
// as a secret: password, sentinel_password, client_secret, token,
// sslkey, api_key and the like.
var secretWords = []string{"password", "passwd", "pwd", "secret", "token", "key"}

// Secret reports whether a query parameter named name carries a secret.
func Secret(name string) bool {
	n := strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// URL returns u as a string with the password of its userinfo and the value
// of every secret query parameter (see Secret) replaced by Mask. u is not
// modified.
func URL(u *url.URL) string {
	if u == nil {
		return ""
	}
	c := *u
	if c.User != nil {
		if _, has := c.User.Password(); has {
			c.User = url.UserPassword(c.User.Username(), Mask)
		}
	}
	if c.RawQuery != "" {
		c.RawQuery = query(c.RawQuery)
	}
	return c.String()
}

// query masks the secret values of a raw query string, keeping the order and
// encoding of everything else.
func query(raw string) string {
	parts := strings.Split(raw, "&")
	for i, p := range parts {
		name, _, hasValue := strings.Cut(p, "=")
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		if hasValue && Secret(name) {
			parts[i] = p[:strings.IndexByte(p, '=')+1] + Mask
		}
	}
	return strings.Join(parts, "&")
}

// pairs masks the secret values of space-separated key=value pairs; a value
// may be single-quoted.
func pairs(raw string) string {
	var b strings.Builder
	for i := 0; i < len(raw); {
		j := strings.IndexByte(raw[i:], '=')
		if j < 0 {
			b.WriteString(raw[i:])
			break
		}
		name := raw[i : i+j]
		b.WriteString(raw[i : i+j+1])
		i += j + 1
		end := i
		if end < len(raw) && raw[end] == '\'' {
			for end++; end < len(raw) && raw[end] != '\''; end++ {
				if raw[end] == '\\' {
					end++
				}
			}
			end = min(end+1, len(raw))
		} else {
			for end < len(raw) && raw[end] != ' ' {
				end++
			}
		}
		if Secret(strings.TrimSpace(name[strings.LastIndexByte(name, ' ')+1:])) {
			b.WriteString(Mask)
		} else {
			b.WriteString(raw[i:end])
		}
		i = end
	}
	return b.String()
}

// String is URL for a URL given as text. Text that does not parse is shown
// as much as can be without risk: the part after the last '@' (the host and
// path, not the userinfo), with its query masked, or nothing at all.
func String(raw string) string {
	u, err := url.Parse(raw)
	if err == nil && (u.Scheme != "" || u.User != nil || u.Host != "") {
		return URL(u)
	}
	if !strings.Contains(raw, "://") && strings.Contains(raw, "=") {
		// Not a URL but a key=value connection string, as PostgreSQL
		// and MySQL drivers take ("host=db password=s3cret").
		return pairs(raw)
	}
	if err == nil {
		return URL(u)
	}
	rest, masked := raw, false
	if i := strings.LastIndex(raw, "@"); i >= 0 {
		rest, masked = raw[i+1:], true
	} else if strings.ContainsAny(raw, "%\\") {
		// A bad escape may hide an '@': show nothing of it.
		return "(unparsable URL)"
	}
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		rest = rest[:i+1] + query(rest[i+1:])
	}
	if masked {
		return Mask + "@" + rest
	}
	return rest
}
