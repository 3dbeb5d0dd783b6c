// Package dlockprom exports dlock's lock events as Prometheus metrics.
//
// An Observer is both a dlock.Observer and a prometheus.Collector: pass it
// to dlock.WithObserver and register it on a registry.
//
//	obs := dlockprom.New()
//	prometheus.MustRegister(obs)
//	client, err := dlock.New(drv, dlock.WithObserver(obs))
//
// It is a module of its own (github.com/dlockhq/dlock/observe/dlockprom),
// so that dlock itself does not depend on the Prometheus client.
//
// # Metrics
//
// Every metric has the label mode (exclusive, shared or semaphore: the mode
// the lock was asked for), and the label key when WithKeyLabel is given.
// Names start with the namespace given by WithNamespace, if any, then
// "dlock_":
//
//	name                          type       labels          what
//	dlock_acquisitions_total      counter    result, reason  finished acquisitions
//	dlock_wait_seconds            histogram  result          time spent acquiring
//	dlock_hold_seconds            histogram  end             time a lock was held
//	dlock_losses_total            counter    cause           locks lost
//	dlock_renewals_total          counter                    successful renewals
//	dlock_renewal_failures_total  counter                    failed renewal attempts
//	dlock_holders                 gauge                      locks held now
//	dlock_waiters                 gauge                      acquisitions under way now
//
// result is "acquired" or "not_acquired". reason is "" for an acquired lock,
// and for one that was not acquired one of held, timeout, cancelled, closed,
// permanent, unavailable, other (see dlock.Event.Reason). end is "released"
// or "lost".
// cause is one of max_hold, not_held, expired (see dlock.Event.Reason).
//
// The gauges count the locks and acquisitions of the Clients this Observer
// observes, in this process; sum them across instances for a fleet.
//
// # Cardinality
//
// Keys are not labels by default: a service that locks one key per order or
// per user would make a time series per key. WithKeyLabel maps each key to
// a label value, which should come from a small set (a key's prefix, say).
package dlockprom

import (
	"sync"

	"github.com/dlockhq/dlock"
	"github.com/prometheus/client_golang/prometheus"
)

// Default histogram buckets, in seconds.
var (
	// DefaultWaitBuckets spans 1ms to about 4 minutes.
	DefaultWaitBuckets = prometheus.ExponentialBuckets(0.001, 4, 10)
	// DefaultHoldBuckets spans 10ms to about 45 minutes.
	DefaultHoldBuckets = prometheus.ExponentialBuckets(0.01, 4, 10)
)

// Option configures an Observer.
type Option func(*config)

type config struct {
	namespace   string
	constLabels prometheus.Labels
	keyLabel    func(key string) string
	waitBuckets []float64
	holdBuckets []float64
}

// WithNamespace puts ns in front of every metric name: ns_dlock_... .
func WithNamespace(ns string) Option {
	return func(c *config) { c.namespace = ns }
}

// WithConstLabels adds labels with fixed values to every metric (the
// service, the store).
func WithConstLabels(l prometheus.Labels) Option {
	return func(c *config) { c.constLabels = l }
}

// WithKeyLabel adds the label key to every metric, with the value f returns
// for the lock's key. f must be fast, safe for concurrent use, and return
// values from a small set: each value is a time series of every metric. A
// typical f keeps the part of the key before its first separator.
func WithKeyLabel(f func(key string) string) Option {
	return func(c *config) { c.keyLabel = f }
}

// WithWaitBuckets sets the buckets of dlock_wait_seconds, in seconds.
func WithWaitBuckets(b []float64) Option {
	return func(c *config) { c.waitBuckets = b }
}

// WithHoldBuckets sets the buckets of dlock_hold_seconds, in seconds.
func WithHoldBuckets(b []float64) Option {
	return func(c *config) { c.holdBuckets = b }
}

// Observer turns dlock events into Prometheus metrics. It implements
// dlock.Observer and prometheus.Collector; it is safe for concurrent use
// and may observe several Clients.
type Observer struct {
	keyLabel func(string) string

	acquisitions    *prometheus.CounterVec
	wait            *prometheus.HistogramVec
	hold            *prometheus.HistogramVec
	losses          *prometheus.CounterVec
	renewals        *prometheus.CounterVec
	renewalFailures *prometheus.CounterVec
	holders         *prometheus.GaugeVec
	waiters         *prometheus.GaugeVec

	mu      sync.Mutex
	waiting map[uint64][]string // acquisitions under way: their label values
}

// New returns an Observer. Register it (it is a prometheus.Collector) and
// pass it to dlock.WithObserver.
func New(opts ...Option) *Observer {
	cfg := config{waitBuckets: DefaultWaitBuckets, holdBuckets: DefaultHoldBuckets}
	for _, opt := range opts {
		opt(&cfg)
	}
	base := []string{"mode"}
	if cfg.keyLabel != nil {
		base = append(base, "key")
	}
	with := func(extra ...string) []string { return append(append([]string(nil), base...), extra...) }
	metricOpts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: cfg.namespace, Subsystem: "dlock", Name: name, Help: help, ConstLabels: cfg.constLabels}
	}
	counter := func(name, help string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts(metricOpts(name, help)), labels)
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts(metricOpts(name, help)), with())
	}
	histogram := func(name, help string, buckets []float64, labels []string) *prometheus.HistogramVec {
		o := metricOpts(name, help)
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: o.Namespace, Subsystem: o.Subsystem, Name: o.Name, Help: o.Help, ConstLabels: o.ConstLabels,
			Buckets: buckets,
		}, labels)
	}
	return &Observer{
		keyLabel:        cfg.keyLabel,
		acquisitions:    counter("acquisitions_total", "Finished lock acquisitions, by result and, for failures, the reason.", with("result", "reason")),
		wait:            histogram("wait_seconds", "Time spent acquiring a lock, by result.", cfg.waitBuckets, with("result")),
		hold:            histogram("hold_seconds", "Time a lock was held, by how the hold ended.", cfg.holdBuckets, with("end")),
		losses:          counter("losses_total", "Locks lost while held, by cause.", with("cause")),
		renewals:        counter("renewals_total", "Successful renewals of held locks' leases.", with()),
		renewalFailures: counter("renewal_failures_total", "Failed renewal attempts of held locks' leases.", with()),
		holders:         gauge("holders", "Locks held now."),
		waiters:         gauge("waiters", "Lock acquisitions under way now."),
		waiting:         map[uint64][]string{},
	}
}

func (o *Observer) collectors() []prometheus.Collector {
	return []prometheus.Collector{o.acquisitions, o.wait, o.hold, o.losses, o.renewals, o.renewalFailures, o.holders, o.waiters}
}

// Describe implements prometheus.Collector.
func (o *Observer) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range o.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	for _, c := range o.collectors() {
		c.Collect(ch)
	}
}

// Observe implements dlock.Observer.
func (o *Observer) Observe(e dlock.Event) {
	lv := []string{e.Mode.String()}
	if o.keyLabel != nil {
		lv = append(lv, o.keyLabel(e.Key))
	}
	with := func(extra ...string) []string { return append(lv[:len(lv):len(lv)], extra...) }
	switch e.Kind {
	case dlock.EventAcquiring:
		o.mu.Lock()
		o.waiting[e.ID] = lv
		o.mu.Unlock()
		o.waiters.WithLabelValues(lv...).Inc()
	case dlock.EventAcquired, dlock.EventNotAcquired:
		o.endWait(e.ID)
		result, reason := "acquired", ""
		if e.Kind == dlock.EventNotAcquired {
			result, reason = "not_acquired", e.Reason()
		} else {
			o.holders.WithLabelValues(lv...).Inc()
		}
		o.acquisitions.WithLabelValues(with(result, reason)...).Inc()
		o.wait.WithLabelValues(with(result)...).Observe(e.Wait.Seconds())
	case dlock.EventReleased:
		o.holders.WithLabelValues(lv...).Dec()
		o.hold.WithLabelValues(with("released")...).Observe(e.Held.Seconds())
	case dlock.EventLost:
		o.holders.WithLabelValues(lv...).Dec()
		o.hold.WithLabelValues(with("lost")...).Observe(e.Held.Seconds())
		o.losses.WithLabelValues(with(e.Reason())...).Inc()
	case dlock.EventRenewed:
		o.renewals.WithLabelValues(lv...).Inc()
	case dlock.EventRenewFailed:
		o.renewalFailures.WithLabelValues(lv...).Inc()
	}
}

// endWait takes the acquisition id off the waiters, if its start was seen.
func (o *Observer) endWait(id uint64) {
	o.mu.Lock()
	lv, ok := o.waiting[id]
	delete(o.waiting, id)
	o.mu.Unlock()
	if ok {
		o.waiters.WithLabelValues(lv...).Dec()
	}
}

var (
	_ dlock.Observer       = (*Observer)(nil)
	_ prometheus.Collector = (*Observer)(nil)
)
