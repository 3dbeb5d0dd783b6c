package natsdlock

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestPermanent(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{jetstream.ErrJetStreamNotEnabled, true},
		{jetstream.ErrJetStreamNotEnabledForAccount, true},
		{nats.ErrAuthorization, true},
		{&jetstream.APIError{Code: 403, Description: "permissions"}, true},
		{fmt.Errorf("bucket: %w", errNoTTL), true},
		{fmt.Errorf("read: %w", errForeign), true},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, false},
		{nats.ErrTimeout, false},
		{nats.ErrNoResponders, false},
		{nats.ErrConnectionClosed, false},
		{context.DeadlineExceeded, false},
	} {
		if got := permanent(tc.err); got != tc.want {
			t.Errorf("Permanent(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
