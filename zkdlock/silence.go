package zkdlock

import (
	"encoding/binary"
	"sync"
	"time"
)

// silenceTimeout is how long a connection may wait for its server to answer
// before the driver closes it. go-zookeeper notices a server that stops
// answering (a hung process, a network that drops its packets) only when
// its receive timeout, two thirds of the session timeout, passes without a
// byte, and waits up to ten times that for a server it has just connected
// to. Meanwhile every request of the driver waits, the holds' leases run
// out on the local clock, and a hold that was released stays on the store.
// Closed sooner, the connection moves to the next server, where the
// session carries on (it lasts the session timeout on the servers), and
// the requests that were in flight fail with zk.ErrConnectionClosed, as on
// any lost connection. Healthy servers, the election of a new leader
// included, answer well within it.
const silenceTimeout = 2 * time.Second

// silence watches a connection for a server that does not answer: the
// requests written (the session's handshake, requests, pings) and the
// replies read, one frame each. A reply is a frame of a 4-byte length and
// a body that starts with the request's xid; a watch notification (xid -1)
// answers nothing. The first frame, the reply to the handshake, has no xid.
type silence struct {
	mu      sync.Mutex
	close   func() error // closes the connection
	pending int          // requests written and not answered yet
	since   time.Time    // when the server last made progress, while pending > 0
	timer   *time.Timer

	hdr     [8]byte // the current frame's length and xid, as far as read
	got     int     // bytes of hdr read
	left    int     // bytes of the current frame still to read after its length
	greeted bool    // the handshake's reply has been read
}

// wrote accounts for a request about to be written.
func (s *silence) wrote() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending++; s.pending == 1 {
		s.since = time.Now()
		s.arm(silenceTimeout)
	}
}

// read accounts for b, bytes read from the server.
func (s *silence) read(b []byte) {
	if len(b) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(b) > 0 {
		switch {
		case s.got < 4: // the frame's length
			k := copy(s.hdr[s.got:4], b)
			s.got, b = s.got+k, b[k:]
			if s.got == 4 {
				s.left = int(binary.BigEndian.Uint32(s.hdr[:4]))
			}
		case s.greeted && s.got < 8: // a reply's xid
			k := copy(s.hdr[s.got:8], b[:min(len(b), s.left)])
			s.got, s.left, b = s.got+k, s.left-k, b[k:]
		default: // the rest of the body
			k := min(len(b), s.left)
			s.left, b = s.left-k, b[k:]
		}
		if s.got >= 4 && s.left == 0 {
			notification := s.greeted && s.got == 8 && int32(binary.BigEndian.Uint32(s.hdr[4:8])) == -1
			if !notification && s.pending > 0 {
				s.pending--
			}
			s.greeted, s.got = true, 0
		}
	}
	if s.pending > 0 {
		s.since = time.Now()
		s.arm(silenceTimeout)
	} else if s.timer != nil {
		s.timer.Stop()
	}
}

// arm (re)starts the timer to check on the connection after d.
func (s *silence) arm(d time.Duration) {
	if s.timer == nil {
		s.timer = time.AfterFunc(d, s.check)
	} else {
		s.timer.Reset(d)
	}
}

// check closes the connection if it has waited silenceTimeout for an
// answer.
func (s *silence) check() {
	s.mu.Lock()
	if s.pending == 0 {
		s.mu.Unlock()
		return
	}
	if left := silenceTimeout - time.Since(s.since); left > 0 {
		s.arm(left)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.close()
}

// stop ends the watch.
func (s *silence) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timer != nil {
		s.timer.Stop()
	}
	s.pending = 0
}
