// Package errclass tells a store's permanent failures from its transient
// ones: a failure that asking again cannot mend while the deployment stays
// as it is (refused credentials, an untrusted certificate, a missing
// table) from one that may pass (a broken connection, a failover, a busy
// store). Package dlock ends a wait at once on a permanent failure and
// retries a transient one; the quorum driver counts its nodes' permanent
// failures with it.
//
// The checks that hold for every store live here; a driver adds its
// store's own by implementing driver.Classifier.
package errclass

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"slices"

	"github.com/dlockhq/dlock/driver"
)

// Permanent reports whether err, returned by one of d's methods, is a
// permanent failure: by the checks of Generic, or by d's own
// classification if d implements driver.Classifier. An error caused by a
// context that ended is never permanent.
func Permanent(d driver.Driver, err error) bool {
	c, _ := d.(driver.Classifier)
	return By(c, err)
}

// By reports whether err is a permanent failure by the checks of Generic
// or by c, if c is not nil. An error caused by a context that ended is
// never permanent.
func By(c driver.Classifier, err error) bool {
	if err == nil || ended(err) {
		return false
	}
	return Generic(err) || c != nil && c.Permanent(err)
}

// Generic reports whether err is a permanent failure by the checks that
// hold for every store: the backend does not support the request
// (driver.ErrUnsupported), or the TLS handshake failed on a certificate or
// a protocol setting, on either side (the client does not trust the
// server's certificate or its name, or the server refused the client's
// certificate or its TLS version). An error caused by a context that
// ended is never permanent.
func Generic(err error) bool {
	if err == nil || ended(err) {
		return false
	}
	return errors.Is(err, driver.ErrUnsupported) || TLSRefused(err)
}

// ended reports whether err was caused by a context that ended.
func ended(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// TLSRefused reports whether err is a failed TLS handshake that a retry
// cannot mend: the client could not verify the server's certificate (an
// unknown authority, a name it is not valid for, an expired or otherwise
// invalid certificate, no system roots), or the server sent an alert that
// refuses the client's certificate or TLS settings.
func TLSRefused(err error) bool {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		roots     x509.SystemRootsError
		verify    *tls.CertificateVerificationError
		alert     tls.AlertError
	)
	switch {
	case errors.As(err, &verify), errors.As(err, &unknownCA), errors.As(err, &hostname),
		errors.As(err, &invalid), errors.As(err, &roots):
		return true
	case errors.As(err, &alert):
		return refusal(alert)
	}
	// An alert from the server comes as a *net.OpError whose Op is
	// "remote error" and whose Err is an alert of an unexported type,
	// with the same text as tls.AlertError.
	for e := err; e != nil; {
		var op *net.OpError
		if !errors.As(e, &op) {
			return false
		}
		if op.Op == "remote error" && op.Err != nil {
			if _, ok := remoteRefusals[op.Err.Error()]; ok {
				return true
			}
		}
		e = op.Err
	}
	return false
}

// refusals are the TLS alerts that refuse a certificate or a setting
// (RFC 8446, section 6.2): asking again with the same configuration gets
// the same answer.
var refusals = []tls.AlertError{
	40,  // handshake_failure: no common parameters
	42,  // bad_certificate
	43,  // unsupported_certificate
	44,  // certificate_revoked
	45,  // certificate_expired
	46,  // certificate_unknown
	48,  // unknown_ca
	49,  // access_denied
	70,  // protocol_version
	71,  // insufficient_security
	112, // unrecognized_name
	116, // certificate_required
}

// remoteRefusals holds the texts of refusals, as a received alert shows
// them.
var remoteRefusals = func() map[string]struct{} {
	m := make(map[string]struct{}, len(refusals))
	for _, a := range refusals {
		m[a.Error()] = struct{}{}
	}
	return m
}()

func refusal(a tls.AlertError) bool { return slices.Contains(refusals, a) }
