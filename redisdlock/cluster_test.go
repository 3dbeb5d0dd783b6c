package redisdlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestConnError(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{redis.Nil, false},
		{fmt.Errorf("acquire: %w", redis.Nil), false},
		{context.Canceled, false},
		{errors.New("MOVED 3999 127.0.0.1:6381"), false},
		{refused, true},
		{fmt.Errorf("acquire: %w", refused), true},
		{io.EOF, true},
		{io.ErrUnexpectedEOF, true},
		{net.ErrClosed, true},
		{context.DeadlineExceeded, true},
	} {
		if got := connError(c.err); got != c.want {
			t.Errorf("connError(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
