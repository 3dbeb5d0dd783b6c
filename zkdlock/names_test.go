package zkdlock

import (
	"crypto/rand"
	"strings"
	"testing"
	"testing/quick"
	"unicode/utf8"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// oddKeys are keys that are not znode names as they are.
var oddKeys = []string{
	"a", "a/b", "a%2Fb", "a%2fb", ".", "..", "...", "%2E", "%2E%2E", "x.y",
	"/", "//", "a/../b", "sp ace", "ctl\x01\x1f\x7f", "\u0085", "\uf000", "\ufff0",
	"ключ", "🔒", "zookeeper", "_c_", "%", "%%", "%zz",
}

func TestEscape(t *testing.T) {
	seen := map[string]string{}
	for _, k := range oddKeys {
		e := escape(k)
		if why := checkPath("/" + e); why != "" || strings.Contains(e, "/") {
			t.Errorf("escape(%q) = %q: not a znode name: %s", k, e, why)
		}
		if back, ok := unescape(e); !ok || back != k {
			t.Errorf("unescape(escape(%q)) = %q, %v", k, back, ok)
		}
		if other, dup := seen[e]; dup {
			t.Errorf("keys %q and %q both escape to %q", k, other, e)
		}
		seen[e] = k
	}
	roundTrip := func(k string) bool {
		if k == "" || !utf8.ValidString(k) || strings.Contains(k, "\x00") {
			return true
		}
		back, ok := unescape(escape(k))
		return ok && back == k && checkPath("/"+escape(k)) == ""
	}
	if err := quick.Check(roundTrip, nil); err != nil {
		t.Error(err)
	}
	for _, name := range []string{"", "a%2", "a%G0", "a%2e", "a b", "a/b", "%2E"} {
		if k, ok := unescape(name); ok && escape(k) != name {
			t.Errorf("unescape(%q) = %q, true; want it rejected", name, k)
		}
	}
}

func TestParseNode(t *testing.T) {
	owner := "owner"
	id := dlock.OwnerID(owner)
	for _, l := range []Layout{CuratorMutex, CuratorReadWriteLock} {
		for _, tc := range []struct {
			mode  driver.Mode
			limit int
		}{{driver.Exclusive, 0}, {driver.Shared, 0}, {driver.Semaphore, 1}, {driver.Semaphore, 250}} {
			name := nodeBase(owner, tc.mode, tc.limit, l) + "0000000042"
			n, ok := parseNode(name)
			if !ok || n.foreign || n.ownerID != id || n.seq != 42 || n.name != name || n.mode != tc.mode || n.limit != tc.limit {
				t.Errorf("parseNode(%q) = %+v, %v", name, n, ok)
			}
		}
	}
	if got := nodeBase(owner, driver.Exclusive, 0, CuratorMutex); got != "_c_"+id+"-lock-" {
		t.Errorf("a write node's name is %q; want Curator's mutex name", got)
	}
	// The names of an earlier version.
	for _, tc := range []struct {
		name  string
		mode  driver.Mode
		limit int
	}{{"_c_" + id + "-read-0000000007", driver.Shared, 0}, {"_c_" + id + "-sem-3-0000000007", driver.Semaphore, 3}} {
		if n, ok := parseNode(tc.name); !ok || n.foreign || n.ownerID != id || n.mode != tc.mode || n.limit != tc.limit || n.seq != 7 {
			t.Errorf("parseNode(%q) = %+v, %v; want the earlier version's node", tc.name, n, ok)
		}
	}
	// Not contenders: no sequence number.
	for _, bad := range []string{"", "locks", "leases", "lock-", "lock-000000001x", nodeBase(owner, driver.Exclusive, 0, CuratorMutex),
		nodeBase(owner, driver.Exclusive, 0, CuratorMutex) + "x"} {
		if n, ok := parseNode(bad); ok {
			t.Errorf("parseNode(%q) = %+v; want rejected", bad, n)
		}
	}
	// Foreign contenders: exclusive, except Curator's readers.
	uuid := "_c_0f8fad5b-d9cb-469f-a165-70867728950e-"
	for _, tc := range []struct {
		name string
		mode driver.Mode
	}{
		{"lock-0000000001", driver.Exclusive},
		{"x-lock-0000000001", driver.Exclusive},
		{uuid + "lock-0000000001", driver.Exclusive},
		{uuid + "__WRIT__0000000001", driver.Exclusive},
		{uuid + "__READ__0000000001", driver.Shared},
		{"_c_x-lock-0000000001", driver.Exclusive},
		{"_c_" + id + "-write-0000000001", driver.Exclusive},
		{"_c_" + id + "-sem-0-0000000001", driver.Exclusive},
		{"_c_" + id + "-sem-01-0000000001", driver.Exclusive},
		{"_c_" + strings.ToUpper(id) + "-lock-0000000001", driver.Exclusive},
		{"0000000001", driver.Exclusive},
	} {
		if n, ok := parseNode(tc.name); !ok || !n.foreign || n.ownerID != "" || n.mode != tc.mode || n.seq != 1 {
			t.Errorf("parseNode(%q) = %+v, %v; want a foreign %v contender", tc.name, n, ok, tc.mode)
		}
	}
	q := queue([]string{nodeBase("b", driver.Shared, 0, CuratorMutex) + "0000000010", "other", nodeBase("a", driver.Exclusive, 0, CuratorMutex) + "0000000002",
		nodeBase("c", driver.Semaphore, 3, CuratorMutex) + "0000000100", uuid + "lock-0000000005"})
	if len(q) != 4 || q[0].seq != 2 || q[1].seq != 5 || q[2].seq != 10 || q[3].seq != 100 {
		t.Errorf("queue = %+v; want the four contenders by sequence number", q)
	}
	for _, tc := range []struct {
		owner, info string
		downgraded  bool
	}{{"o", "", false}, {"o:1", "host:pid", true}, {"", "x", false}, {"12:ab", ":", true}, {"shared:", "shared:", false}} {
		o, i, dg, ok := decodeData(encodeData(tc.owner, tc.info, tc.downgraded))
		if !ok || o != tc.owner || i != tc.info || dg != tc.downgraded {
			t.Errorf("decodeData(encodeData(%q, %q, %v)) = %q, %q, %v, %v", tc.owner, tc.info, tc.downgraded, o, i, dg, ok)
		}
	}
}

// TestOddKeys locks keys that need escaping, all at once: they are distinct
// locks, and listing names them as they are.
func TestOddKeys(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	d := newTestDriver(t, srv.Addr)
	p := "odd:" + rand.Text()[:8] + ":"
	var reqs []driver.Request
	for _, k := range oddKeys {
		r := req(p + k)
		r.Info = "info " + k
		res, err := d.Acquire(ctx(t), r)
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire(%q) = %+v, %v", r.Key, res, err)
		}
		reqs = append(reqs, r)
	}
	hs, err := d.List(ctx(t), p)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != len(oddKeys) {
		t.Errorf("List = %d holders; want %d", len(hs), len(oddKeys))
	}
	byKey := map[string]driver.Holder{}
	for _, h := range hs {
		byKey[h.Key] = h
	}
	for _, r := range reqs {
		h, ok := byKey[r.Key]
		if !ok || h.Owner != r.Owner || h.Info != r.Info || h.TTL <= 0 {
			t.Errorf("holder of %q = %+v, %v; want owner %q, info %q", r.Key, h, ok, r.Owner, r.Info)
		}
		if err := d.Release(ctx(t), r); err != nil {
			t.Errorf("Release(%q) = %v", r.Key, err)
		}
	}
	d.Close() // deletes the keys' lingering znodes
	assertNoResidue(t, srv.Addr, p)
}

// TestSubscribePredecessor checks that a waiter is woken by its
// predecessor's release, and then follows the next one.
func TestSubscribePredecessor(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	d := newTestDriver(t, srv.Addr)
	k := key(t)
	a, b, c := req(k), req(k), req(k)
	b.Queue, c.Queue = true, true
	for _, r := range []driver.Request{a, b, c} {
		if _, err := d.Acquire(ctx(t), r); err != nil {
			t.Fatal(err)
		}
	}
	if h, _ := d.holds.Get(c.Owner); len(h.wait) != 1 {
		t.Fatalf("c's record has no predecessor")
	}
	sub, err := d.Subscribe(ctx(t), c)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// b leaves the queue: c's predecessor is gone.
	if err := d.Release(ctx(t), b); err != nil {
		t.Fatal(err)
	}
	wait(t, sub.C(), "signal for the predecessor's release")
	if res, err := d.Acquire(ctx(t), c); err != nil || res.Acquired {
		t.Fatalf("c's Acquire with a still holding = %+v, %v", res, err)
	}
	// a releases: c's new predecessor is gone.
	if err := d.Release(ctx(t), a); err != nil {
		t.Fatal(err)
	}
	wait(t, sub.C(), "signal for the holder's release")
	if res, err := d.Acquire(ctx(t), c); err != nil || !res.Acquired {
		t.Fatalf("c's Acquire after the holder's release = %+v, %v", res, err)
	}
	if err := d.Release(ctx(t), c); err != nil {
		t.Fatal(err)
	}
	d.Close()
	assertNoResidue(t, srv.Addr, k)
}
