package urlutil

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"time"

	"github.com/dlockhq/dlock/internal/ctxerr"
)

// DefaultConnectTimeout bounds the opening of a store by URL (dial, TLS
// handshake, authentication and a first request) unless the URL sets its
// own connect timeout.
const DefaultConnectTimeout = 5 * time.Second

// The likely causes Connect names when a store's client failed to connect.
var (
	// ErrNoTLSAnswer means that a TLS client got no TLS handshake from the
	// server: it did not answer, closed the connection or answered in
	// plain text.
	ErrNoTLSAnswer = errors.New("the server did not answer the TLS handshake (is this a TLS port?)")
	// ErrTLSAnswer means that a client without TLS failed on a server that
	// answers a TLS handshake.
	ErrTLSAnswer = errors.New("the server answered with TLS")
	// ErrConnectTimeout means that the store did not answer within the
	// connect timeout.
	ErrConnectTimeout = errors.New("no answer within the connect timeout")
)

// probeTimeout bounds the TLS handshake by which Connect looks for the
// cause of a failure.
const probeTimeout = time.Second

// Connect describes how a store's client connects, for Connect.
type Connect struct {
	// Endpoints are the servers' addresses (host:port).
	Endpoints []string
	// TLS is the client's TLS configuration, nil without TLS.
	TLS *tls.Config
	// Timeout bounds the connection (DefaultConnectTimeout if it is not
	// positive); TimeoutParam names the URL parameter that sets it.
	Timeout      time.Duration
	TimeoutParam string
	// TLSHint says how the URL turns TLS on ("use rediss:// or tls=true"),
	// or that it cannot.
	TLSHint string
}

// Do runs connect, the client's first request, with ctx bounded by the
// connect timeout. On a failure that looks like a client and a server that
// disagree on TLS (no answer, a connection closed or reset, an answer that
// is not TLS), it tries a TLS handshake with the endpoints to name the
// likely cause: ErrNoTLSAnswer for a TLS client, ErrTLSAnswer for a client
// without TLS, or the refused connection (syscall.ECONNREFUSED) that a
// client library that retries reports as a timeout. A timeout is reported
// as ErrConnectTimeout. The error wraps connect's.
func (c Connect) Do(ctx context.Context, connect func(ctx context.Context) error) error {
	if c.Timeout <= 0 {
		c.Timeout = DefaultConnectTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	err := connect(cctx)
	if err == nil || ctx.Err() != nil {
		return err
	}
	if cause := c.cause(ctx, err); cause != nil {
		return fmt.Errorf("%w: %w", cause, err)
	}
	switch {
	case ctxerr.Err(cctx) != nil:
		return fmt.Errorf("%w (%s=%v): %w", ErrConnectTimeout, c.TimeoutParam, c.Timeout, err)
	case isTimeout(err):
		return fmt.Errorf("%w (see %s): %w", ErrConnectTimeout, c.TimeoutParam, err)
	}
	return err
}

// cause probes the endpoints for a TLS mismatch behind err, and returns
// the cause found, or nil.
func (c Connect) cause(ctx context.Context, err error) error {
	if !mismatch(err) {
		return nil
	}
	var header tls.RecordHeaderError
	if c.TLS != nil && errors.As(err, &header) {
		return ErrNoTLSAnswer
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cfg := c.TLS
	if cfg == nil {
		cfg = &tls.Config{InsecureSkipVerify: true} // only to see whether it speaks TLS
	}
	results := make(chan error, len(c.Endpoints))
	for _, ep := range c.Endpoints {
		go func() { _, err := shake(pctx, ep, cfg); results <- err }()
	}
	var cause error
	refused := 0
	for range c.Endpoints {
		err := <-results
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			if refused++; refused == len(c.Endpoints) && cause == nil {
				cause = fmt.Errorf("nothing listens there (%w)", err)
			}
		case c.TLS == nil && err == nil:
			cause = fmt.Errorf("%w: %s", ErrTLSAnswer, c.TLSHint)
		case c.TLS != nil && err != nil && mismatch(err):
			cause = ErrNoTLSAnswer
		}
	}
	return cause
}

// mismatch reports whether err is what a client gets from a server that
// does not speak its language: no answer, a connection closed or reset, an
// answer that is not TLS to a TLS client.
func mismatch(err error) bool {
	var header tls.RecordHeaderError
	return isTimeout(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.As(err, &header)
}

// isTimeout reports whether err is a timeout of the network or of a
// context.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// ParamConnectTimeout bounds Open on every store's URL: the store's own
// name for its connect timeout (dial_timeout, dial-timeout, timeout) is
// accepted too.
const ParamConnectTimeout = "connect_timeout"

// ConnectTimeout moves connect_timeout in q, the query of u, to native, the
// name the store's URL gives its connect timeout. Both at once is an Error.
func ConnectTimeout(u *url.URL, q url.Values, native string) error {
	if !q.Has(ParamConnectTimeout) {
		return nil
	}
	if q.Has(native) {
		return Error(u, "has both %s and %s; give one", ParamConnectTimeout, native)
	}
	q[native] = q[ParamConnectTimeout]
	q.Del(ParamConnectTimeout)
	return nil
}
