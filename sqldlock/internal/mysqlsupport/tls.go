package mysqlsupport

import (
	"crypto/tls"
	"net/url"
	"strconv"

	"github.com/dlockhq/dlock/internal/urlutil"
)

// mysqlTLS reads the TLS parameters of dlock's own store URLs (cacert, cert,
// key, servername; see internal/urlutil.TLS) out of q, the query of a
// mysql:// URL, and returns the verifying TLS configuration they ask for, or
// nil if there are none: then tls= alone is go-sql-driver's (true,
// skip-verify, preferred or the name of a configuration registered with
// mysql.RegisterTLSConfig). With them tls may only be true (or absent): the
// parameters configure a verifying connection, which skip-verify,
// preferred or another configuration would contradict.
func mysqlTLS(u *url.URL, q url.Values) (*tls.Config, error) {
	if !q.Has(urlutil.ParamCACert) && !q.Has(urlutil.ParamCert) && !q.Has(urlutil.ParamKey) && !q.Has(urlutil.ParamServerName) {
		return nil, nil
	}
	if v := q.Get(urlutil.ParamTLS); q.Has(urlutil.ParamTLS) {
		if _, err := strconv.ParseBool(v); err != nil {
			return nil, urlutil.Error(u, "%s=%s with %s, %s, %s or %s: those configure a verifying TLS connection of their own; drop %s or write %s=true",
				urlutil.ParamTLS, v, urlutil.ParamCACert, urlutil.ParamCert, urlutil.ParamKey, urlutil.ParamServerName, urlutil.ParamTLS, urlutil.ParamTLS)
		}
	}
	return urlutil.TLS(u, q, true)
}
