package zkdlock

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// frame returns a frame of the protocol: the body's length and the body, a
// reply with xid followed by n bytes.
func frame(xid int32, n int) []byte {
	b := make([]byte, 8+n)
	binary.BigEndian.PutUint32(b, uint32(4+n))
	binary.BigEndian.PutUint32(b[4:], uint32(xid))
	return b
}

// TestSilenceCountsReplies feeds the watch of a connection its handshake
// and replies, split at every byte and whole, and checks the requests it
// counts as unanswered: a notification answers nothing.
func TestSilenceCountsReplies(t *testing.T) {
	greeting := make([]byte, 4+36) // the reply to the handshake: no xid
	binary.BigEndian.PutUint32(greeting, 36)
	var stream []byte
	stream = append(stream, greeting...)
	stream = append(stream, frame(1, 10)...)
	stream = append(stream, frame(-1, 20)...) // a watch notification
	stream = append(stream, frame(2, 0)...)
	stream = append(stream, frame(-2, 12)...) // a ping's reply
	for _, chunk := range []int{1, 3, 7, len(stream)} {
		s := silence{close: func() error { return nil }}
		for range 4 { // the handshake, two requests and a ping
			s.wrote()
		}
		for b := stream; len(b) > 0; {
			k := min(chunk, len(b))
			s.read(b[:k])
			b = b[k:]
		}
		if s.pending != 0 {
			t.Errorf("read in chunks of %d: %d requests unanswered; want 0", chunk, s.pending)
		}
		s.wrote()
		s.read(frame(-1, 5))
		if s.pending != 1 {
			t.Errorf("read in chunks of %d: after a notification, %d requests unanswered; want 1", chunk, s.pending)
		}
		s.stop()
	}
}

// TestSilentServerIsLeft checks that a driver leaves a connection whose
// server stopped answering (a proxy that blackholes it) soon after
// silenceTimeout, not after go-zookeeper's receive timeout (two thirds of
// the session timeout, 10s here).
func TestSilentServerIsLeft(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	p, err := testsrv.StartProxy(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	disconnected := make(chan struct{})
	var once sync.Once
	d, err := New([]string{p.Addr()}, WithSessionTTL(15*time.Second), WithConnectOptions(zk.WithEventCallback(func(ev zk.Event) {
		if ev.Type == zk.EventSession && ev.State == zk.StateDisconnected {
			once.Do(func() { close(disconnected) })
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	defer p.Unblock()
	r := req(key(t))
	if res, err := d.Acquire(ctx(t), r); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	defer d.Release(context.Background(), r)
	p.Block()
	start := time.Now()
	refreshed := make(chan error, 1)
	go func() { refreshed <- d.Refresh(context.Background(), r) }()
	select {
	case <-disconnected:
		t.Logf("left the silent connection after %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(silenceTimeout + 3*time.Second):
		t.Fatalf("still on the silent connection after %v", time.Since(start).Round(time.Millisecond))
	}
	p.Unblock()
	<-refreshed
}
