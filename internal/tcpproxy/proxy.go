// Package tcpproxy forwards TCP connections from a loopback port to a
// server, and can delay or cut them off: the tests use it to make a network
// slow or partitioned, and `dlock check` to do the same to one worker.
package tcpproxy

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards TCP connections from a loopback port to a server. It can
// delay every chunk of bytes, as a network with a round trip of twice the
// delay does, and it can cut connections off: Block stops every byte in both
// directions without closing anything, as a network partition does, so that
// clients see silence rather than a reset; Reset closes the connections
// with a reset.
type Proxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // time.Duration
	done   chan struct{}
	wg     sync.WaitGroup

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	blocked chan struct{} // non-nil while blocked; closed by Unblock
}

// Start listens on a free port on 127.0.0.1 and forwards each connection
// to target.
func Start(target string) (*Proxy, error) { return StartDelayed(target, 0) }

// StartDelayed is Start with every chunk of bytes delivered delay after it
// was read, in order, in both directions.
func StartDelayed(target string, delay time.Duration) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.delay.Store(int64(delay))
	p.wg.Go(p.serve)
	return p, nil
}

// SetDelay changes the delay of the chunks read from now on.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Addr returns the address to dial instead of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Block stops forwarding on current and new connections. New connections are
// still accepted, but nothing flows until Unblock.
func (p *Proxy) Block() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blocked == nil {
		p.blocked = make(chan struct{})
	}
}

// Unblock resumes forwarding, delivering what was held back.
func (p *Proxy) Unblock() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blocked != nil {
		close(p.blocked)
		p.blocked = nil
	}
}

// Reset closes every current connection with a TCP reset, as a server that
// drops its clients (a failover, a restart) does. New connections are
// accepted and forwarded as before.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close with RST
		}
		c.Close()
	}
}

// Close stops listening, closes every connection and waits for the
// forwarding goroutines to end.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	select {
	case <-p.done:
	default:
		close(p.done)
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, s) {
			return
		}
		p.wg.Go(func() { p.pipe(s, c) })
		p.wg.Go(func() { p.pipe(c, s) })
	}
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		for _, c := range cs {
			c.Close()
		}
		return false
	default:
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

// pipe copies src to dst, each chunk delay after it was read and only while
// the proxy is not blocked. When one side ends, both connections are closed.
func (p *Proxy) pipe(dst, src net.Conn) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	ch := make(chan chunk, 256)
	p.wg.Go(func() {
		defer close(ch)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{buf[:n], time.Now().Add(time.Duration(p.delay.Load()))}
			}
			if err != nil {
				return // io.EOF or a closed connection: either ends both
			}
		}
	})
	for c := range ch {
		if d := time.Until(c.at); d > 0 {
			time.Sleep(d)
		}
		if !p.wait() {
			break
		}
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
	for range ch { // let the reader finish
	}
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// wait returns when the proxy is not blocked, or false once it is closed.
func (p *Proxy) wait() bool {
	for {
		p.mu.Lock()
		ch := p.blocked
		p.mu.Unlock()
		if ch == nil {
			return true
		}
		select {
		case <-ch:
		case <-p.done:
			return false
		}
	}
}
