package ctxerr

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestWrap(t *testing.T) {
	io := errors.New("i/o timeout")
	if err := Wrap(context.Background(), io); err != io {
		t.Errorf("Wrap on a live context = %v; want the error itself", err)
	}
	if err := Wrap(context.Background(), nil); err != nil {
		t.Errorf("Wrap(nil) = %v", err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Wrap(cancelled, io); !errors.Is(err, context.Canceled) || !errors.Is(err, io) {
		t.Errorf("Wrap on a cancelled context = %v; want both errors", err)
	}
	if err := Wrap(cancelled, context.Canceled); err != context.Canceled {
		t.Errorf("Wrap of ctx's own error = %v; want it unchanged", err)
	}
	// A deadline in the past counts, whether or not the timer has fired.
	past, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	if err := Wrap(past, io); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, io) {
		t.Errorf("Wrap past the deadline = %v; want both errors", err)
	}
	if err := Err(notYet{past}); err != context.DeadlineExceeded {
		t.Errorf("Err of a context whose timer has not fired = %v; want DeadlineExceeded", err)
	}
}

// notYet is a context past its deadline whose Err still reports nil, as a
// timer context does in the moment before its timer fires.
type notYet struct{ context.Context }

func (notYet) Err() error { return nil }
