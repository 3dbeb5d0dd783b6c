// Package notify fans release notifications out to the subscriptions of one
// process. Drivers that learn about releases from a single source (an
// in-memory store, one LISTEN connection, one pub/sub connection) use a Hub
// to wake exactly the waiters of the released key.
package notify

import "sync"

// Hub maps keys to their subscriptions. The zero Hub is ready to use; it is
// safe for concurrent use.
type Hub struct {
	mu   sync.Mutex
	subs map[string]map[*Sub]struct{}
}

// Sub is a subscription to one key, or to several. It implements
// driver.Subscription.
type Sub struct {
	h    *Hub
	keys []string
	ch   chan struct{}
	once sync.Once
}

// Subscribe returns a subscription that is signalled by every later Notify
// of key (or of any of keys) and by NotifyAll.
func (h *Hub) Subscribe(key string, keys ...string) *Sub {
	s := &Sub{h: h, keys: append([]string{key}, keys...), ch: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		h.subs = map[string]map[*Sub]struct{}{}
	}
	for _, k := range s.keys {
		m := h.subs[k]
		if m == nil {
			m = map[*Sub]struct{}{}
			h.subs[k] = m
		}
		m[s] = struct{}{}
	}
	return s
}

// Notify signals the subscriptions of key.
func (h *Hub) Notify(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs[key] {
		s.signal()
	}
}

// NotifyAll signals every subscription, for when notifications may have
// been missed (a reconnect).
func (h *Hub) NotifyAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.subs {
		for s := range m {
			s.signal()
		}
	}
}

// Len returns the number of live subscriptions.
func (h *Hub) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	subs := map[*Sub]struct{}{}
	for _, m := range h.subs {
		for s := range m {
			subs[s] = struct{}{}
		}
	}
	return len(subs)
}

// signal makes a non-blocking send: signals coalesce while one is pending.
func (s *Sub) signal() {
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

// C returns the channel that receives the signals.
func (s *Sub) C() <-chan struct{} { return s.ch }

// Close ends the subscription. It is idempotent.
func (s *Sub) Close() error {
	s.once.Do(func() {
		s.h.mu.Lock()
		defer s.h.mu.Unlock()
		for _, k := range s.keys {
			m := s.h.subs[k]
			delete(m, s)
			if len(m) == 0 {
				delete(s.h.subs, k)
			}
		}
	})
	return nil
}
