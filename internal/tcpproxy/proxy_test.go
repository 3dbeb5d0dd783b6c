package tcpproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

func TestProxyBlock(t *testing.T) {
	p, err := Start(echoServer(t))
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

func TestDelayedProxy(t *testing.T) {
	const delay = 2 * time.Millisecond
	p, err := StartDelayed(echoServer(t), delay)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := bytes.Repeat([]byte("dlock"), 10000)
	start := time.Now()
	go c.Write(msg)
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	// A lower bound, not a timing measurement: the bytes cannot come back
	// before they were held back twice.
	if rtt := time.Since(start); rtt < 2*delay {
		t.Errorf("round trip %v through the proxy, want at least %v", rtt, 2*delay)
	}
	if !bytes.Equal(got, msg) {
		t.Error("the proxy changed the bytes")
	}
}

// echoServer starts a TCP echo server on loopback, closed when t ends.
func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func TestSetDelay(t *testing.T) {
	p, err := Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip := func() time.Duration {
		start := time.Now()
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	const delay = 50 * time.Millisecond
	p.SetDelay(delay)
	if rtt := roundTrip(); rtt < 2*delay {
		t.Errorf("round trip %v after SetDelay(%v), want at least %v", rtt, delay, 2*delay)
	}
}

func TestProxyReset(t *testing.T) {
	p, err := Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 3)
	if _, err := c.Write([]byte("one")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("echo through the proxy: %v", err)
	}
	p.Reset()
	if _, err := c.Read(buf); err == nil {
		t.Fatal("connection still open after Reset")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c2.Write([]byte("two")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c2, buf); err != nil || string(buf) != "two" {
		t.Fatalf("echo on a new connection after Reset: %q, %v", buf, err)
	}
}
