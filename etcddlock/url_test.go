package etcddlock

import (
	"net"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

func TestURL(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	for _, tc := range []struct{ url, arg, names string }{
		{"etcd://", "url", "no server"},
		{"etcd://" + srv.Addr + "/db", "url", "/db"},
		{"etcd://" + srv.Addr + "?nope=1", "url", "nope"},
		{"etcd://" + srv.Addr + "?session=soon", "url", "soon"},
		{"etcd://" + srv.Addr + "?session=0s", "url", "0s"},
		{"etcd://" + srv.Addr + "?dial-timeout=-1s", "url", "-1s"},
		{"etcd://" + srv.Addr + "?prefix=", "prefix", "empty"},
		{"etcd://" + srv.Addr + ",:x", "url", ":x"},
	} {
		dlocktest.RejectURL(t, tc.url, tc.arg, tc.names)
	}
	c, err := dlock.Open(ctx(t), "etcd://"+srv.Addr+","+srv.Addr+"?session=3s&prefix=/app1/&dial-timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	d := c.Driver().(*Driver)
	if d.prefix != "/app1/" || d.sessionTTL != 3 || !d.owns {
		t.Errorf("driver = prefix %q, session %ds, owns %v", d.prefix, d.sessionTTL, d.owns)
	}
	if eps := d.cli.Endpoints(); len(eps) != 2 {
		t.Errorf("endpoints = %q; want both", eps)
	}
	k := key(t)
	l, err := c.TryLock(ctx(t), k)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := admin(t).Get(ctx(t), "/app1/"+k+"/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Errorf("entry under the URL's prefix: %v, %v", resp, err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	// A server that does not answer fails the Open, with the password
	// hidden.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, err = dlock.Open(ctx(t), "etcd://user:secret@"+addr+"?dial-timeout=300ms")
	if err == nil {
		c.Close()
		t.Fatal("Open of a closed port succeeded")
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("error shows the password: %v", err)
	}
}
