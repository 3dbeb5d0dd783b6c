// Package ctxerr ties the errors of a call to the context it ran under, so
// that callers can test a failed call with errors.Is(err, ctx.Err()).
package ctxerr

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Err returns ctx's error, or context.DeadlineExceeded once ctx's deadline
// has passed even if ctx's timer has not fired yet: a client that turns the
// deadline into a socket deadline (go-redis) can report an I/O timeout a
// moment before ctx.Err() changes.
func Err(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// Wrap returns err, wrapped with Err(ctx) when ctx is done and err does not
// wrap that already. It returns nil for a nil err.
func Wrap(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	cerr := Err(ctx)
	if cerr == nil || errors.Is(err, cerr) {
		return err
	}
	return fmt.Errorf("%w (%w)", cerr, err)
}
