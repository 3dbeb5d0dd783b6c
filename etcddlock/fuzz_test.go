package etcddlock

import (
	"strings"
	"testing"
	"unicode/utf8"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// FuzzEntryNames checks that the entry names of a key, of every kind, parse
// back to that key and belong to its queue and not to a nested key's.
func FuzzEntryNames(f *testing.F) {
	f.Add("/dlock/", "a", int64(0x694d9b0a1c2e7f01), uint32(0), 2)
	f.Add("", "a/b", int64(1), uint32(3), 1)
	f.Fuzz(func(t *testing.T, prefix, key string, lease int64, n uint32, limit int) {
		if !validKey(key) || limit < 1 {
			return
		}
		d := &Driver{prefix: prefix}
		names := []string{d.entryName(key, clientv3.LeaseID(lease), n), d.permitName(key, limit, clientv3.LeaseID(lease), n)}
		for _, name := range names {
			if got, ok := d.parseEntry(name); !ok || got != key {
				t.Fatalf("parseEntry(%q) = %q, %v; want %q", name, got, ok, key)
			}
		}
		kvs := d.own(key, kvsOf(names...))
		if len(kvs) != len(names) {
			t.Fatalf("own(%q) keeps %d of the key's own entries %q", key, len(kvs), names)
		}
		nested := d.entryName(key+"/x", clientv3.LeaseID(lease), n)
		if kvs := d.own(key, kvsOf(nested)); len(kvs) != 0 {
			t.Fatalf("own(%q) keeps the nested key's entry %q", key, nested)
		}
	})
}

// validKey reports whether key is a key package dlock passes to a driver.
func validKey(key string) bool {
	return key != "" && utf8.ValidString(key) && !strings.ContainsRune(key, 0)
}

func kvsOf(names ...string) []*mvccpb.KeyValue {
	kvs := make([]*mvccpb.KeyValue, len(names))
	for i, n := range names {
		kvs[i] = &mvccpb.KeyValue{Key: []byte(n)}
	}
	return kvs
}
