package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/redact"
)

// DefaultStorePath returns the file of the embedded default store (see
// dlock.DefaultStorePath).
func DefaultStorePath() (string, error) { return dlock.DefaultStorePath() }

// SQLiteURL returns the dlock URL of the SQLite database file at the absolute
// path p (see dlock.SQLiteURL).
func SQLiteURL(p string) string { return dlock.SQLiteURL(p) }

// storeDirMode is the mode of the default store's directory when dlock
// creates it (the XDG base directory specification asks for 0700).
const storeDirMode = 0o700

// storeURL resolves the store: --url, else $DLOCK_URL, else the default
// SQLite file, whose directory it creates. It checks that a URL given by the
// user parses (see checkStoreURL).
func (a *app) storeURL() (string, error) {
	if a.url != "" {
		return a.url, checkStoreURL(a.url, "--url")
	}
	if u := env("DLOCK_URL"); u != "" {
		return u, checkStoreURL(u, "$DLOCK_URL")
	}
	p, err := DefaultStorePath()
	if err != nil {
		return "", exitf(ExitUnavailable, "cannot locate the default store (%v); give --url or set DLOCK_URL", err)
	}
	if err := os.MkdirAll(filepath.Dir(p), storeDirMode); err != nil {
		return "", exitf(ExitUnavailable, "cannot create the default store's directory: %v", err)
	}
	return SQLiteURL(p), nil
}

// open opens a Client on the resolved store. Its errors are exitErrors: bad
// URLs are usage errors, everything else makes the store unavailable.
func (a *app) open(ctx context.Context, opts ...dlock.Option) (*dlock.Client, error) {
	raw, err := a.storeURL()
	if err != nil {
		return nil, err
	}
	if a.verbose {
		opts = append(opts, dlock.WithLogger(a.log))
	}
	a.log.Debug("opening store", "url", redact.String(raw))
	c, err := dlock.Open(ctx, raw, opts...)
	switch {
	case err == nil:
		return c, nil
	case errors.Is(err, dlock.ErrInvalidArgument):
		return nil, &exitError{code: ExitUsage, err: err}
	default:
		return nil, exitf(ExitUnavailable, "cannot open the store: %s", message(err))
	}
}

// opTimeout bounds the short commands (ls, release, schema), store
// connection included.
const opTimeout = 30 * time.Second

// withClient opens the store, runs fn with a context bounded by opTimeout,
// and closes the store.
func (a *app) withClient(fn func(ctx context.Context, c *dlock.Client) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	c, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer a.close(c)
	return fn(ctx, c)
}

// closeGrace bounds how long the CLI waits for Client.Close before it exits.
// Close waits for the store's requests still in flight, which on a server
// that hangs (one node of a Redlock, say) last until the client library's
// timeouts; by then the CLI has released its lock wherever the store
// answers, and what a hung server keeps ends with its lease. Exiting ends
// the rest.
const closeGrace = time.Second

// close closes c, waiting at most closeGrace.
func (a *app) close(c *dlock.Client) {
	done := make(chan error, 1)
	go func() { done <- c.Close() }()
	select {
	case err := <-done:
		if err != nil {
			a.log.Warn("closing the store", "err", err)
		}
	case <-time.After(closeGrace):
		a.log.Debug("the store is still closing; exiting without waiting for servers that do not answer")
	}
}

// storeError turns an error from a store operation into an exitError.
func storeError(what string, err error) error {
	switch {
	case errors.Is(err, dlock.ErrInvalidArgument):
		return &exitError{code: ExitUsage, err: err}
	case errors.Is(err, dlock.ErrUnsupported):
		return exitf(ExitUnavailable, "%s: this store does not support it (%s)", what, message(err))
	default:
		return exitf(ExitUnavailable, "%s: %s", what, message(err))
	}
}
