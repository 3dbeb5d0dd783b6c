package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The legs of a handoff on Redis (the handoff-os cell): where the time from
// the holder calling release to the waiter holding the lock goes. The
// server's own clock says when each command arrived (MONITOR: the server
// stamps each command it runs, to the microsecond, with the machine's
// clock, which the bench's processes share), and a subscriber to every
// channel (PSUBSCRIBE *) in the bench's process says when a release's
// notification reached a client. The waiter's own receipt of its
// notification cannot be seen from outside the library (no Event reports
// it), so the waiter's leg is split at the spy's receipt.

// handoffWindow is one handoff as its clients saw it: release called and
// returned (holder), lock held (waiter).
type handoffWindow struct {
	holder                string // the holder's client name
	called, returned, got time.Time
}

// legs are the medians of the legs of the handoffs of a cell, from the
// server's and a spy subscriber's timestamps.
type legs struct {
	Handoffs int `json:"handoffs"` // handoffs whose release and acquire the server's log showed
	// Release call -> the server runs the release (the holder's library,
	// its client and the request's way in).
	ReleaseSend time.Duration `json:"release_send"`
	// The server runs the release -> the release call returns.
	ReleaseReply time.Duration `json:"release_reply"`
	// The server runs the release -> a subscriber in the bench process
	// reads the notification (0: nothing was published).
	Delivery time.Duration `json:"delivery,omitempty"`
	// The server runs the release -> the server sees the waiter's first
	// command after it (notification, wake-up, the library's work, any
	// sleep between polls). This and the next two are medians over the
	// handoffs in which the waiter sent a command (0: none did, as when
	// the release hands the lock to the waiter and says so).
	Wake time.Duration `json:"wake"`
	// The waiter's first command after the release -> its last one before
	// it held the lock (0: one command).
	Extra time.Duration `json:"extra"`
	// The waiter's last command -> its Lock returns holding the lock.
	AcquireReply time.Duration `json:"acquire_reply"`
	// Commands per handoff, by the holder (from the release on) and by the
	// waiter, and the most frequent sequence of them.
	HolderCmds float64 `json:"holder_cmds"`
	WaiterCmds float64 `json:"waiter_cmds"`
	Sequence   string  `json:"sequence"`
}

// monitorLine is a command the server ran: when, from which client
// (address, or "lua" for a script's), and its name.
type monitorLine struct {
	at       time.Time
	src, cmd string
}

// monitor records the commands of a redis-server (MONITOR) and the arrival
// of every pub/sub message (PSUBSCRIBE *) on two connections of its own.
type monitor struct {
	addr     string
	mon, spy net.Conn
	wg       sync.WaitGroup
	mu       sync.Mutex
	lines    []monitorLine
	msgs     []time.Time
	names    map[string]string // client names by address, read by finish
}

// startLegs starts recording the server at addr for the legs of the
// handoffs of cell c: those across processes on Redis (nil for the other
// cells).
func startLegs(c cell, addr string) (*monitor, error) {
	if c.store != "redis" || c.workload != "handoff-os" {
		return nil, nil
	}
	m, err := startMonitor(addr)
	if err != nil {
		return nil, fmt.Errorf("monitor: %w", err)
	}
	return m, nil
}

// finish reads the names of the server's clients and stops recording.
func (m *monitor) finish(ctx context.Context) error {
	if m == nil {
		return nil
	}
	defer m.stop()
	var err error
	if m.names, err = clientNames(ctx, m.addr); err != nil {
		return fmt.Errorf("client list: %w", err)
	}
	return nil
}

// startMonitor starts recording the server at addr.
func startMonitor(addr string) (*monitor, error) {
	m := &monitor{addr: addr}
	var err error
	if m.mon, err = dialSend(addr, "MONITOR"); err != nil {
		return nil, err
	}
	if m.spy, err = dialSend(addr, "PSUBSCRIBE *"); err != nil {
		m.mon.Close()
		return nil, err
	}
	// Both answer before anything is recorded: MONITOR "+OK", PSUBSCRIBE
	// its confirmation (whose lines name no "pmessage").
	ready := make(chan struct{}, 2)
	read := func(c net.Conn, line func(string, time.Time)) {
		m.wg.Go(func() {
			r := bufio.NewReader(c)
			first := true
			for {
				s, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if first {
					first = false
					ready <- struct{}{}
				}
				line(strings.TrimRight(s, "\r\n"), time.Now())
			}
		})
	}
	read(m.mon, func(s string, _ time.Time) {
		if l, ok := parseMonitor(s); ok {
			m.mu.Lock()
			m.lines = append(m.lines, l)
			m.mu.Unlock()
		}
	})
	read(m.spy, func(s string, now time.Time) {
		if s == "pmessage" {
			m.mu.Lock()
			m.msgs = append(m.msgs, now)
			m.mu.Unlock()
		}
	})
	<-ready
	<-ready
	return m, nil
}

func dialSend(addr, cmd string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// stop ends the recording.
func (m *monitor) stop() {
	m.mon.Close()
	m.spy.Close()
	m.wg.Wait()
}

// parseMonitor parses a MONITOR line: +1700000000.123456 [0 127.0.0.1:5000] "evalsha" ...
func parseMonitor(s string) (monitorLine, bool) {
	ts, rest, ok := strings.Cut(strings.TrimPrefix(s, "+"), " [")
	src, args, ok2 := strings.Cut(rest, "] ")
	sec, usec, ok3 := strings.Cut(ts, ".")
	if !ok || !ok2 || !ok3 {
		return monitorLine{}, false
	}
	sn, err1 := strconv.ParseInt(sec, 10, 64)
	un, err2 := strconv.ParseInt(usec, 10, 64)
	if err1 != nil || err2 != nil {
		return monitorLine{}, false
	}
	_, src, _ = strings.Cut(src, " ") // "0 127.0.0.1:5000": the database, then the client
	cmd, _, _ := strings.Cut(strings.TrimPrefix(args, `"`), `"`)
	return monitorLine{at: time.Unix(sn, un*1000), src: src, cmd: strings.ToLower(cmd)}, true
}

// sequence is the commands of a handoff, a script's own commands counted
// after it (PUBLISH by name).
type sequence struct {
	cmds []string
	n    []int
}

func (q *sequence) add(cmd string) { q.cmds, q.n = append(q.cmds, cmd), append(q.n, 0) }

func (q *sequence) script(cmd string) {
	if len(q.cmds) == 0 {
		return
	}
	if cmd == "publish" {
		q.cmds[len(q.cmds)-1] += "+publish"
	} else {
		q.n[len(q.n)-1]++
	}
}

func (q *sequence) String() string {
	var b strings.Builder
	for i, c := range q.cmds {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(c)
		if q.n[i] > 0 {
			fmt.Fprintf(&b, "(%d in script)", q.n[i])
		}
	}
	return b.String()
}

// clientNames returns the names of the clients of the server at addr by
// their addresses (CLIENT LIST).
func clientNames(ctx context.Context, addr string) (map[string]string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	list, err := c.ClientList(ctx).Result()
	if err != nil {
		return nil, err
	}
	names := map[string]string{}
	for _, line := range strings.Split(list, "\n") {
		var a, n string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "addr="); ok {
				a = v
			} else if v, ok := strings.CutPrefix(f, "name="); ok {
				n = v
			}
		}
		names[a] = n
	}
	return names, nil
}

// legs splits the handoffs ws by the server's log (nil for a nil monitor):
// the release is the holder's first command in the window, the waiter's
// commands are those of other named clients after it (a script's own
// commands are counted in the sequence only).
func (m *monitor) legs(ws []handoffWindow) *legs {
	if m == nil {
		return nil
	}
	names := m.names
	m.mu.Lock()
	defer m.mu.Unlock()
	var send, reply, deliv, wake, extra, acq []time.Duration
	var holder, waiter int
	seqs := map[string]int{}
	for _, w := range ws {
		i, _ := slices.BinarySearchFunc(m.lines, w.called, func(l monitorLine, t time.Time) int { return l.at.Compare(t) })
		var rel *monitorLine
		var first, last time.Time
		var seq sequence
		h, n := 0, 0
		for ; i < len(m.lines) && !m.lines[i].at.After(w.got); i++ {
			l := &m.lines[i]
			name := names[l.src]
			switch {
			case name == w.holder:
				if rel == nil {
					rel = l
				}
				h++
				seq.add("H:" + l.cmd)
				continue
			case rel == nil: // the waiter's polls before the release
				continue
			case l.src == "lua":
				seq.script(l.cmd)
				continue
			case name == "" || l.cmd == "unsubscribe": // the waiter leaves the channel once it holds
				continue
			}
			if n++; first.IsZero() {
				first = l.at
			}
			last = l.at
			seq.add("W:" + l.cmd)
		}
		if rel == nil {
			continue
		}
		send, reply = append(send, rel.at.Sub(w.called)), append(reply, w.returned.Sub(rel.at))
		if n > 0 { // none if the release handed the lock over
			wake, extra, acq = append(wake, first.Sub(rel.at)), append(extra, last.Sub(first)), append(acq, w.got.Sub(last))
		}
		j, _ := slices.BinarySearchFunc(m.msgs, rel.at, func(t, u time.Time) int { return t.Compare(u) })
		if j < len(m.msgs) && !m.msgs[j].After(w.got) {
			deliv = append(deliv, m.msgs[j].Sub(rel.at))
		}
		holder, waiter = holder+h, waiter+n
		seqs[seq.String()]++
	}
	if len(send) == 0 {
		return nil
	}
	g := &legs{Handoffs: len(send), ReleaseSend: pct(send, .5), ReleaseReply: pct(reply, .5), Delivery: pct(deliv, .5),
		Wake: pct(wake, .5), Extra: pct(extra, .5), AcquireReply: pct(acq, .5),
		HolderCmds: float64(holder) / float64(len(send)), WaiterCmds: float64(waiter) / float64(len(send))}
	for s, n := range seqs {
		if n > seqs[g.Sequence] || n == seqs[g.Sequence] && s < g.Sequence {
			g.Sequence = s
		}
	}
	g.Sequence += " (" + strconv.Itoa(seqs[g.Sequence]) + " of " + strconv.Itoa(len(send)) + ")"
	return g
}
