package fence

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dlockhq/dlock"
)

// ErrStaleToken means a write was refused because its fencing token is lower
// than one the resource has already accepted: the writer's lock has passed
// to a later holder. Every refusal is a *StaleTokenError, which matches
// ErrStaleToken with errors.Is.
var ErrStaleToken = errors.New("fence: stale fencing token")

// StaleTokenError reports a write refused for its stale token. It matches
// ErrStaleToken with errors.Is.
type StaleTokenError struct {
	// Resource names what was written: the resource given to Check or
	// Redis.Set, or the table and row of an Update.
	Resource string
	// Token is the refused token.
	Token uint64
	// Seen is the highest token the resource has accepted, as read right
	// after the refusal; 0 if it could not be read.
	Seen uint64
}

// Error implements error.
func (e *StaleTokenError) Error() string {
	if e.Seen == 0 {
		return fmt.Sprintf("fence: stale token %d for %q: a higher token was accepted", e.Token, e.Resource)
	}
	return fmt.Sprintf("fence: stale token %d for %q: token %d was accepted", e.Token, e.Resource, e.Seen)
}

// Is reports whether target is ErrStaleToken.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// maxResourceLen is the longest resource name: the width of the fence
// table's key column on MySQL.
const maxResourceLen = 255

// checkToken rejects the token 0, which no hold has (a token left unset),
// and, if signed, a token above math.MaxInt64, which a signed 64-bit SQL
// integer cannot hold. The error is a *dlock.ArgError.
func checkToken(token uint64, signed bool) error {
	switch {
	case token == 0:
		return &dlock.ArgError{Name: "token", Value: token, Reason: "is no fencing token (every hold has a token above 0)"}
	case signed && token > math.MaxInt64:
		return &dlock.ArgError{Name: "token", Value: token, Reason: "is above " + strconv.FormatInt(math.MaxInt64, 10) + ", the largest signed 64-bit SQL integer"}
	}
	return nil
}

// checkResource rejects an empty resource name, one longer than
// maxResourceLen bytes, and one that is not valid UTF-8 or contains a NUL
// byte, which PostgreSQL's text cannot hold (the rules of dlock's keys, so
// that a lock's key is always a valid resource name on every dialect).
func checkResource(resource string) error {
	switch {
	case resource == "":
		return &dlock.ArgError{Name: "resource", Value: resource, Reason: "must not be empty"}
	case len(resource) > maxResourceLen:
		return &dlock.ArgError{Name: "resource", Value: resource, Reason: "is longer than " + strconv.Itoa(maxResourceLen) + " bytes"}
	case !utf8.ValidString(resource):
		return &dlock.ArgError{Name: "resource", Value: resource, Reason: "is not valid UTF-8"}
	case strings.IndexByte(resource, 0) >= 0:
		return &dlock.ArgError{Name: "resource", Value: resource, Reason: "contains a NUL byte"}
	}
	return nil
}

// checkUse rejects a nil context and a nil client or database handle
// (named name), on which the client library would panic.
func checkUse(ctx context.Context, name string, client any) error {
	switch v := reflect.ValueOf(client); {
	case ctx == nil:
		return &dlock.ArgError{Name: "ctx", Value: nil, Reason: "must not be nil"}
	case client == nil, v.Kind() == reflect.Pointer && v.IsNil():
		return &dlock.ArgError{Name: name, Value: nil, Reason: "must not be nil"}
	}
	return nil
}
