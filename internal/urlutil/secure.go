package urlutil

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// ParamInsecureAuth is the URL parameter that allows a password to be sent
// without TLS ("insecure_auth=true").
const ParamInsecureAuth = "insecure_auth"

// Password reads and removes the insecure_auth parameter from q, the query
// of u, and returns the user name and password of u's user information, if
// it has any. Both must be given. The password is for sending to the server
// over TLS (tls is true when the URL asks for it): without TLS, Password
// refuses it unless the URL says insecure_auth=true. Its errors are Errors,
// which show u with the password masked.
func Password(u *url.URL, q url.Values, tls bool) (user, password string, err error) {
	insecure := false
	if v := q.Get(ParamInsecureAuth); q.Has(ParamInsecureAuth) {
		if insecure, err = strconv.ParseBool(v); err != nil {
			return "", "", Error(u, "%s=%q: want true or false", ParamInsecureAuth, v)
		}
		q.Del(ParamInsecureAuth)
	}
	if u.User == nil {
		return "", "", nil
	}
	password, ok := u.User.Password()
	switch {
	case u.User.Username() == "" || !ok || password == "":
		return "", "", Error(u, "has user information without a user name and a password (write %s://user:password@host)", u.Scheme)
	case !tls && !insecure:
		return "", "", Error(u, "would send the password of user %q in clear text: connect over TLS (%s=true, or %s=) or allow it with %s=true",
			u.User.Username(), ParamTLS, ParamCACert, ParamInsecureAuth)
	}
	return u.User.Username(), password, nil
}

// CheckTLS completes a TLS handshake with cfg with each of endpoints
// (host:port), in parallel, for a client library to dial them afterwards.
// Client libraries (gRPC, go-zookeeper) retry a handshake that fails until
// their dial timeout and then report the timeout alone, while a certificate
// that does not verify now will not verify on the next attempt either:
// CheckTLS turns that into an error that says why, at once. It returns nil as soon as one
// endpoint completes a handshake, and also when no endpoint gave a definite
// answer (refused, silent: the client reports those as it always does);
// otherwise, the error of an endpoint whose certificate does not verify,
// that rejected the client's certificate, or that does not speak TLS.
func CheckTLS(ctx context.Context, endpoints []string, cfg *tls.Config) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan error, len(endpoints))
	for _, ep := range endpoints {
		go func() { results <- handshake(ctx, ep, cfg) }()
	}
	var found error
	for i := range endpoints {
		err := <-results
		if err == nil {
			cancel()
			// The others end at once; none outlives the call.
			for range len(endpoints) - i - 1 {
				<-results
			}
			return nil
		}
		if why := definite(err); found == nil && why != "" {
			found = fmt.Errorf("%s: %w", why, err)
		}
	}
	return found
}

// handshake dials ep and completes a TLS handshake. In TLS 1.3 a server
// that rejects the client's certificate says so only after the handshake,
// so a handshake of TLS 1.3 is followed by another of TLS 1.2 at most, in
// which it says so within the handshake (a server that refuses TLS 1.2
// gives no definite answer to that one).
func handshake(ctx context.Context, ep string, cfg *tls.Config) error {
	v, err := shake(ctx, ep, cfg)
	if err == nil && v == tls.VersionTLS13 {
		cfg = cfg.Clone()
		cfg.MaxVersion = tls.VersionTLS12
		_, err = shake(ctx, ep, cfg)
	}
	if err != nil {
		return fmt.Errorf("TLS handshake with %s: %w", ep, err)
	}
	return nil
}

// shake dials ep, completes a TLS handshake, closes the connection and
// returns the version the handshake settled on.
func shake(ctx context.Context, ep string, cfg *tls.Config) (uint16, error) {
	d := tls.Dialer{Config: cfg}
	c, err := d.DialContext(ctx, "tcp", ep)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.(*tls.Conn).ConnectionState().Version, nil
}

// definite says why a handshake failed if trying again will not change it:
// the server's certificate does not verify, the server rejected the
// client's certificate (or the lack of one), or the server does not speak
// TLS. Otherwise it returns "".
func definite(err error) string {
	var verify *tls.CertificateVerificationError
	var header tls.RecordHeaderError
	var remote *net.OpError
	switch {
	case errors.As(err, &verify):
		return fmt.Sprintf("the server's certificate is not trusted (see %s and %s)", ParamCACert, ParamServerName)
	case errors.As(err, &header):
		return "the server does not speak TLS"
	case errors.As(err, &remote) && remote.Op == "remote error" &&
		// An alert from the server: crypto/tls gives it no type of its
		// own over TCP, only its description.
		certificateAlerts[strings.TrimPrefix(remote.Err.Error(), "tls: ")]:
		return fmt.Sprintf("the server rejected the client certificate (see %s and %s)", ParamCert, ParamKey)
	}
	return ""
}

// certificateAlerts are the descriptions crypto/tls gives the TLS alerts by
// which a server rejects a client's certificate (RFC 8446, section 6.2).
var certificateAlerts = map[string]bool{
	"bad certificate":               true,
	"unsupported certificate":       true,
	"revoked certificate":           true,
	"expired certificate":           true,
	"unknown certificate":           true,
	"unknown certificate authority": true,
	"access denied":                 true,
	"certificate required":          true,
}
