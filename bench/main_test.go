package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestAllWorkloads runs every workload on every library for a few
// milliseconds, so that the program keeps compiling and running. It needs
// redis-server (the program starts five).
func TestAllWorkloads(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := config{
		settings: settings{ttl: 10 * time.Second, retry: time.Millisecond, pool: 8},
		dur:      40 * time.Millisecond,
		warm:     10 * time.Millisecond,
		budget:   30 * time.Second,
		clients:  2,
		slices:   2,
	}
	if testing.Short() {
		cfg.only = regexp.MustCompile(`/baseline$`)
	}
	rep, err := run(ctx, cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Ping.Ops == 0 || rep.Ping.LockP50 <= 0 {
		t.Errorf("no PING round trips measured: %+v", rep.Ping)
	}
	want := 0
	for _, c := range cells(cfg) {
		for _, lib := range libraries {
			if c.runs(lib, cfg.only) {
				want++
			}
		}
	}
	if len(rep.Results) != want {
		t.Errorf("%d results, want %d", len(rep.Results), want)
	}
	for _, r := range rep.Results {
		if r.Errors > 0 || r.Ops == 0 || r.GaveUp > 0 {
			t.Errorf("%s: %d ops, %d gave up, %d errors (first: %s)", r.Cell, r.Ops, r.GaveUp, r.Errors, r.FirstErr)
		}
		if r.Workload == "handoff" && r.HandoffCallP50 <= 0 {
			t.Errorf("%s: no handoff latency", r.Cell)
		}
	}

	var out bytes.Buffer
	rep.print(&out)
	for _, s := range []string{"Round trip", "Uncontended", "Hot key", "Handoff", "Targets for dlock"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, out.String())
		}
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Error(err)
	}
	if t.Failed() {
		t.Log("\n" + out.String())
	}
}

func TestTable(t *testing.T) {
	tb := table{header: []string{"name", "n"}, left: 1}
	tb.add("a", "1")
	tb.add("bbb", "1000")
	var b bytes.Buffer
	tb.write(&b)
	want := "name     n\na        1\nbbb   1000\n\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
}

func TestFmtDur(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                         "0",
		12345 * time.Nanosecond:   "12µs",
		-3 * time.Microsecond:     "-3µs",
		1500 * time.Microsecond:   "1.50ms",
		123456 * time.Microsecond: "123.5ms",
		2 * time.Second:           "2.00s",
	} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestDelayProxy(t *testing.T) {
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
	const delay = 2 * time.Millisecond
	px, err := startProxy(ln.Addr().String(), delay)
	if err != nil {
		t.Fatal(err)
	}
	defer px.close()
	c, err := net.Dial("tcp", px.addr())
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
	if rtt := time.Since(start); rtt < 2*delay {
		t.Errorf("round trip %v through the proxy, want at least %v", rtt, 2*delay)
	}
	if !bytes.Equal(got, msg) {
		t.Error("the proxy changed the bytes")
	}
}
