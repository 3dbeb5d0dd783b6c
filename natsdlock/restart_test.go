package natsdlock

import (
	"testing"
	"time"

	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// TestTokensSurviveRestart checks that fencing tokens keep growing across a
// crash and restart of the server, even when the bucket was empty at the
// crash (the released hold's marker had expired): the stream's last
// sequence is on disk, not only its messages.
func TestTokensSurviveRestart(t *testing.T) {
	srv, err := testsrv.StartNATS(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	d := newTestDriver(t, srv.Addr)
	r := req(key(t))
	res, err := d.Acquire(ctx(t), r)
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	if err := d.Release(ctx(t), r); err != nil {
		t.Fatal(err)
	}
	// The release's marker expires after markerTTL; the server has no
	// signal for it, so look until the stream is empty.
	for deadline := time.Now().Add(30 * time.Second); ; {
		s, err := d.js.Stream(ctx(t), d.stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream keeps %d messages after the release", info.State.Msgs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.Close()
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(ctx(t)); err != nil {
		t.Fatal(err)
	}
	d = newTestDriver(t, srv.Addr)
	for _, k := range []string{r.Key, key(t) + "-other"} {
		r2 := req(k)
		res2, err := d.Acquire(ctx(t), r2)
		if err != nil || !res2.Acquired {
			t.Fatalf("Acquire %q after the restart = %+v, %v", k, res2, err)
		}
		if res2.Token <= res.Token {
			t.Errorf("token of %q after the restart = %d; want more than %d, the token before it", k, res2.Token, res.Token)
		}
		if err := d.Release(ctx(t), r2); err != nil {
			t.Fatal(err)
		}
	}
}
