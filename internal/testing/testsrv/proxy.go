package testsrv

import (
	"time"

	"github.com/dlockhq/dlock/internal/tcpproxy"
)

// Proxy forwards TCP connections from a loopback port to a server. It can
// delay every chunk of bytes, as a network with a round trip of twice the
// delay does, and it can cut connections off: Block stops every byte in both
// directions without closing anything, as a network partition does, so that
// clients see silence rather than a reset. It is package tcpproxy's Proxy.
type Proxy = tcpproxy.Proxy

// StartProxy listens on a free port on 127.0.0.1 and forwards each connection
// to target.
func StartProxy(target string) (*Proxy, error) { return tcpproxy.Start(target) }

// StartDelayedProxy is StartProxy with every chunk of bytes delivered delay
// after it was read, in order, in both directions.
func StartDelayedProxy(target string, delay time.Duration) (*Proxy, error) {
	return tcpproxy.StartDelayed(target, delay)
}
