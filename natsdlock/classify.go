package natsdlock

import (
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Permanent implements driver.Classifier: JetStream not enabled on the
// server or for the account, a refused authorization or permission, a
// bucket that cannot hold leases, a record that is not dlock's. A
// connection that broke or timed out, a JetStream cluster without a leader
// (it is electing one) and a compare-and-set that lost are transient.
func (d *Driver) Permanent(err error) bool { return permanent(err) }

func permanent(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.Code == 403 {
		return true
	}
	return errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) ||
		errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrPermissionViolation) ||
		errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) ||
		errors.Is(err, errNoTTL) || errors.Is(err, errForeign)
}
