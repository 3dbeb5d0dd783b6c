package testsrv

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

func TestProxyBlock(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // echo server
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	p, err := StartProxy(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echo := func(msg string) error {
		if _, err := c.Write([]byte(msg)); err != nil {
			return err
		}
		buf := make([]byte, len(msg))
		_, err := io.ReadFull(c, buf)
		if err == nil && string(buf) != msg {
			t.Errorf("echo %q; want %q", buf, msg)
		}
		return err
	}
	if err := echo("one"); err != nil {
		t.Fatalf("echo through the proxy: %v", err)
	}
	p.Block()
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if err := echo("two"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("echo while blocked: %v; want a read timeout", err)
	}
	p.Unblock()
	c.SetReadDeadline(time.Time{})
	buf := make([]byte, 3)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "two" {
		t.Fatalf("after Unblock read %q, %v; want the held-back \"two\"", buf, err)
	}
	p.Block()
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := c.Read(buf); err == nil {
		t.Error("connection still open after Close")
	}
}
