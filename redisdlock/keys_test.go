package redisdlock

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// awkwardKeys are user keys that could break a naive hash tag.
var awkwardKeys = []string{
	"plain", "{", "}", "{}", "}{", "{a}", "a{b}c", "x}y{z", "{{}}", "}}}", "{{{",
	"%", "%7B", "%7D", "%25", "a%7Bb", "{%}", "*?[]\\", "é{ü}",
}

func TestEscapeKey(t *testing.T) {
	seen := map[string]string{}
	for _, k := range awkwardKeys {
		e := escapeKey(k)
		if strings.ContainsAny(e, "{}") {
			t.Errorf("escapeKey(%q) = %q; contains a brace", k, e)
		}
		if back, ok := unescapeKey(e); !ok || back != k {
			t.Errorf("unescapeKey(escapeKey(%q)) = %q, %v", k, back, ok)
		}
		if other, dup := seen[e]; dup {
			t.Errorf("escapeKey(%q) = escapeKey(%q) = %q", k, other, e)
		}
		seen[e] = k
		for _, p := range awkwardKeys {
			if strings.HasPrefix(k, p) != strings.HasPrefix(e, escapeKey(p)) {
				t.Errorf("prefix %q of %q: escaping does not keep the relation", p, k)
			}
		}
	}
	for _, bad := range []string{"%", "%7", "%41", "{", "a}"} {
		if _, ok := unescapeKey(bad); ok {
			t.Errorf("unescapeKey(%q) accepted text escapeKey never writes", bad)
		}
	}
}

func TestCRC16(t *testing.T) {
	// The CRC-16/XMODEM check value, and a slot redis-cli reports.
	// TestSlotGrouping compares many more with the server.
	for key, want := range map[string]uint16{"123456789": 0x31c3, "foo": 12182} {
		if got := slot(key); got != want {
			t.Errorf("slot(%q) = %d; want %d", key, got, want)
		}
	}
	tags := slotTags()
	for s, tag := range tags {
		if tag == "" || slot(tag) != uint16(s) || len(tag) > 4 {
			t.Fatalf("slot tag for %d = %q (slot %d)", s, tag, slot(tag))
		}
	}
}

// TestSlotGrouping checks, against the Cluster's own CLUSTER KEYSLOT, that
// every key of a lock (and its channel) falls into one hash slot, in every
// mode and for keys with braces, and that the locks work on the Cluster.
func TestSlotGrouping(t *testing.T) {
	srv := testsrv.Get(t, testsrv.RedisCluster)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	node := redis.NewClient(&redis.Options{Addr: srv.Addrs[0]})
	defer node.Close()
	keyslot := func(k string) int64 {
		t.Helper()
		n, err := node.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q: %v", k, err)
		}
		if uint16(n) != slot(k) {
			t.Errorf("slot(%q) = %d; the server says %d", k, slot(k), n)
		}
		return n
	}
	for _, k := range []string{"foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "{user1000}.following", "a}b", "{}x}"} {
		keyslot(k)
	}
	for _, mode := range []Protocol{Script, Transaction, Legacy} {
		for _, prefix := range []string{"", "p:", "}x{"} {
			if mode != Legacy && strings.ContainsAny(prefix, "{}") {
				continue
			}
			t.Run(mode.String()+"/"+prefix, func(t *testing.T) {
				cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: srv.Addrs, ContextTimeoutEnabled: true})
				defer cc.Close()
				d, err := New(cc, WithProtocol(mode), WithPrefix(prefix+"slot"+time.Now().Format("150405.000000")+":"))
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				for _, key := range awkwardKeys {
					k := d.layout(key)
					want := keyslot(k.lock)
					for _, other := range []string{k.fence, k.holder, k.channel} {
						if other != "" && keyslot(other) != want {
							t.Errorf("key %q: %q is in slot %d, the lock %q in %d", key, other, keyslot(other), k.lock, want)
						}
					}
					tag := key
					if ut, ok := userTag(key); ok {
						tag = ut // the key's own hash tag decides its slot
					}
					if mode != Legacy && slot(k.lock) != crc16(d.cfg.prefix+escapeKey(tag))%16384 {
						t.Errorf("key %q: the lock %q is not hashed by the driver's tag", key, k.lock)
					}
					req := driver.Request{Key: key, Owner: "owner-" + key, TTL: time.Minute, Info: "slots"}
					res, err := d.Acquire(ctx, req)
					if err != nil || !res.Acquired {
						t.Fatalf("Acquire(%q) = %+v, %v", key, res, err)
					}
					if err := d.Refresh(ctx, req); err != nil {
						t.Errorf("Refresh(%q): %v", key, err)
					}
					hs, err := d.List(ctx, key)
					if err != nil || len(hs) == 0 || hs[0].Key != key || hs[0].Token != res.Token {
						t.Errorf("List(%q) = %+v, %v; want the holder with token %d", key, hs, err, res.Token)
					}
					if err := d.Release(ctx, req); err != nil {
						t.Errorf("Release(%q): %v", key, err)
					}
				}
				if n, err := d.Count(ctx, ""); err != nil || n != 0 {
					t.Errorf("Count = %d, %v; want 0", n, err)
				}
			})
		}
	}
}

// TestKeyOfHash checks that the name of a lock hash, in either form, gives
// back its key and nothing else does.
func TestKeyOfHash(t *testing.T) {
	keys := append(slices.Clone(awkwardKeys), "order:{42}:a", "order:{42}:b", "{42}", "x{42}", "{4}2}", "a{}{b}")
	for _, prefix := range []string{"", "dlock:", "p%"} {
		d := &Driver{cfg: config{prefix: prefix}}
		seen := map[string]string{}
		for _, k := range keys {
			name := d.base(k)
			if other, dup := seen[name]; dup {
				t.Errorf("prefix %q: keys %q and %q share the lock hash %q", prefix, k, other, name)
			}
			seen[name] = k
			if got, ok := d.keyOfHash(name); !ok || got != k {
				t.Errorf("prefix %q: keyOfHash(%q) = %q, %v; want %q", prefix, name, got, ok, k)
			}
			for _, suffix := range []string{fenceSuffix, holdersSuffix, channelSuffix} {
				if got, ok := d.keyOfHash(name + suffix); ok {
					t.Errorf("prefix %q: keyOfHash(%q) = %q; want no key", prefix, name+suffix, got)
				}
			}
		}
		if slot(d.base("order:{42}:a")) != slot(d.base("order:{42}:b")) {
			t.Errorf("prefix %q: keys with one hash tag are in different slots", prefix)
		}
		for _, bad := range []string{"{" + prefix + "}", "{" + prefix + "a}{b}", "{" + prefix + "42}{x%7B42%7D}x", "{" + prefix + "%}"} {
			if got, ok := d.keyOfHash(bad); ok {
				t.Errorf("prefix %q: keyOfHash(%q) = %q; want no key", prefix, bad, got)
			}
		}
	}
}

func TestSideLockKey(t *testing.T) {
	for _, lk := range append(awkwardKeys, "a}b", "{}x}", "p:}{") {
		for _, suffix := range []string{legacyHolderSuffix, legacyFenceSuffix} {
			sk := sideKey(lk, suffix)
			if got, ok := sideLockKey(sk, suffix); !ok || got != lk {
				t.Errorf("sideLockKey(%q) = %q, %v; want %q", sk, got, ok, lk)
			}
			if slot(sk) != slot(lk) {
				t.Errorf("side key %q in slot %d, lock key %q in %d", sk, slot(sk), lk, slot(lk))
			}
		}
	}
}
