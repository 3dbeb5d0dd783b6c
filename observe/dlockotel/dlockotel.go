// Package dlockotel traces and measures dlock's locks with OpenTelemetry.
//
// An Observer is a dlock.Observer: pass it to dlock.WithObserver.
//
//	obs, err := dlockotel.New() // the global TracerProvider and MeterProvider
//	client, err := dlock.New(drv, dlock.WithObserver(obs))
//
// It is a module of its own (github.com/dlockhq/dlock/observe/dlockotel), so
// that dlock itself does not depend on OpenTelemetry.
//
// # Traces
//
// Each acquisition (Lock, TryLock, Do, and each key of LockAll and
// TryLockAll) is a span named "dlock.acquire", from the moment it starts
// to the moment it gets the lock or gives up, child of the span in the
// context passed to the call. Concurrent acquisitions, of one key or many,
// each get their own span (dlock.Event.ID matches them up). Its attributes:
//
//	dlock.key      the lock's key (see WithSpanKey)
//	dlock.mode     exclusive, shared or semaphore
//	dlock.limit    the number of permits (semaphores only)
//	dlock.outcome  acquired or not_acquired
//	dlock.reason   why it was not acquired: held, timeout, cancelled,
//	               closed, permanent, unavailable, other (see
//	               dlock.Event.Reason)
//	dlock.token    the fencing token (acquired only)
//
// A span that did not get the lock has status Error, unless the lock was
// simply held (reason held: the expected outcome of a TryLock that loses).
// A lost lock adds the event "dlock.lost" (with dlock.key and dlock.cause)
// to the span in the acquiring call's context, if that span is still
// recording.
//
// # Metrics
//
// Every instrument has the attribute dlock.mode, and dlock.key when
// WithKeyAttribute is given (keys are not attributes of metrics by default:
// one series per key would not scale).
//
//	name                    instrument        unit  attributes      what
//	dlock.acquisitions      Int64Counter            result, reason  finished acquisitions
//	dlock.wait.duration     Float64Histogram  s     result          time spent acquiring
//	dlock.hold.duration     Float64Histogram  s     end             time a lock was held
//	dlock.losses            Int64Counter            cause           locks lost
//	dlock.renewals          Int64Counter                            successful renewals
//	dlock.renewal.failures  Int64Counter                            failed renewal attempts
//	dlock.holders           Int64UpDownCounter                      locks held now
//	dlock.waiters           Int64UpDownCounter                      acquisitions under way now
//
// The attributes are dlock.result (acquired, not_acquired), dlock.reason
// (on not_acquired only), dlock.end (released, lost) and dlock.cause
// (max_hold, not_held, expired). They match the metrics of package
// github.com/dlockhq/dlock/observe/dlockprom.
package dlockotel

import (
	"context"
	"sync"
	"time"

	"github.com/dlockhq/dlock"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracer and meter.
const ScopeName = "github.com/dlockhq/dlock/observe/dlockotel"

// Attribute keys of spans and metrics.
const (
	KeyAttr     = attribute.Key("dlock.key")     // the lock's key, or what WithSpanKey / WithKeyAttribute make of it
	ModeAttr    = attribute.Key("dlock.mode")    // exclusive, shared or semaphore
	LimitAttr   = attribute.Key("dlock.limit")   // a semaphore's number of permits (spans)
	OutcomeAttr = attribute.Key("dlock.outcome") // acquired or not_acquired (spans)
	ReasonAttr  = attribute.Key("dlock.reason")  // why an acquisition failed (dlock.Event.Reason)
	TokenAttr   = attribute.Key("dlock.token")   // the fencing token of an acquired lock (spans)
	ResultAttr  = attribute.Key("dlock.result")  // acquired or not_acquired (metrics)
	EndAttr     = attribute.Key("dlock.end")     // released or lost (dlock.hold.duration)
	CauseAttr   = attribute.Key("dlock.cause")   // why a lock was lost (dlock.Event.Reason)
)

// Option configures an Observer.
type Option func(*config)

type config struct {
	tp        trace.TracerProvider
	mp        metric.MeterProvider
	spanKey   func(string) string
	metricKey func(string) string
}

// WithTracerProvider sets the provider of the tracer. The default is the
// global one (otel.GetTracerProvider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithMeterProvider sets the provider of the meter. The default is the
// global one (otel.GetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithSpanKey sets what spans record as dlock.key: f's value for the
// lock's key, and no attribute at all when f returns "". By default spans
// record the key as it is; keys that hold personal data can be hashed or
// dropped here.
func WithSpanKey(f func(key string) string) Option {
	return func(c *config) { c.spanKey = f }
}

// WithKeyAttribute adds dlock.key to every metric, with the value f
// returns for the lock's key. f must be fast, safe for concurrent use, and
// return values from a small set: each value is a series of every
// instrument.
func WithKeyAttribute(f func(key string) string) Option {
	return func(c *config) { c.metricKey = f }
}

// Observer turns dlock events into OpenTelemetry spans and metrics. It
// implements dlock.Observer, is safe for concurrent use, and may observe
// several Clients.
type Observer struct {
	tracer    trace.Tracer
	spanKey   func(string) string
	metricKey func(string) string

	acquisitions    metric.Int64Counter
	wait            metric.Float64Histogram
	hold            metric.Float64Histogram
	losses          metric.Int64Counter
	renewals        metric.Int64Counter
	renewalFailures metric.Int64Counter
	holders         metric.Int64UpDownCounter
	waiters         metric.Int64UpDownCounter

	mu      sync.Mutex
	waiting map[uint64]waiting // acquisitions under way, by Event.ID
}

// waiting is an acquisition under way.
type waiting struct {
	span  trace.Span
	attrs attribute.Set // its metric attributes
}

// New returns an Observer, or an error if an instrument cannot be made.
func New(opts ...Option) (*Observer, error) {
	cfg := config{spanKey: func(k string) string { return k }}
	for _, opt := range opts {
		opt(&cfg)
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	o := &Observer{
		tracer:    cfg.tp.Tracer(ScopeName),
		spanKey:   cfg.spanKey,
		metricKey: cfg.metricKey,
		waiting:   map[uint64]waiting{},
	}
	m := cfg.mp.Meter(ScopeName)
	var err error
	counter := func(name, desc string) metric.Int64Counter {
		c, e := m.Int64Counter(name, metric.WithDescription(desc))
		if err == nil {
			err = e
		}
		return c
	}
	updown := func(name, desc string) metric.Int64UpDownCounter {
		c, e := m.Int64UpDownCounter(name, metric.WithDescription(desc))
		if err == nil {
			err = e
		}
		return c
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		h, e := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"))
		if err == nil {
			err = e
		}
		return h
	}
	o.acquisitions = counter("dlock.acquisitions", "Finished lock acquisitions, by result and, for failures, the reason.")
	o.wait = histogram("dlock.wait.duration", "Time spent acquiring a lock, by result.")
	o.hold = histogram("dlock.hold.duration", "Time a lock was held, by how the hold ended.")
	o.losses = counter("dlock.losses", "Locks lost while held, by cause.")
	o.renewals = counter("dlock.renewals", "Successful renewals of held locks' leases.")
	o.renewalFailures = counter("dlock.renewal.failures", "Failed renewal attempts of held locks' leases.")
	o.holders = updown("dlock.holders", "Locks held now.")
	o.waiters = updown("dlock.waiters", "Lock acquisitions under way now.")
	if err != nil {
		return nil, err
	}
	return o, nil
}

// attrs returns the metric attributes of e, with extra ones.
func (o *Observer) attrs(e dlock.Event, extra ...attribute.KeyValue) attribute.Set {
	kv := append(make([]attribute.KeyValue, 0, 2+len(extra)), ModeAttr.String(e.Mode.String()))
	if o.metricKey != nil {
		kv = append(kv, KeyAttr.String(o.metricKey(e.Key)))
	}
	return attribute.NewSet(append(kv, extra...)...)
}

// ctxOf returns the context of e, or a background context.
func ctxOf(e dlock.Event) context.Context {
	if e.Ctx != nil {
		return e.Ctx
	}
	return context.Background()
}

// Observe implements dlock.Observer.
func (o *Observer) Observe(e dlock.Event) {
	// Metrics are recorded on a context without cancellation: the
	// acquiring call's context may have ended long ago.
	mctx := context.WithoutCancel(ctxOf(e))
	switch e.Kind {
	case dlock.EventAcquiring:
		o.start(e)
	case dlock.EventAcquired, dlock.EventNotAcquired:
		o.finish(e)
		result := "acquired"
		extra := []attribute.KeyValue{ResultAttr.String(result)}
		if e.Kind == dlock.EventNotAcquired {
			result = "not_acquired"
			extra = []attribute.KeyValue{ResultAttr.String(result), ReasonAttr.String(e.Reason())}
		} else {
			o.holders.Add(mctx, 1, metric.WithAttributeSet(o.attrs(e)))
		}
		o.acquisitions.Add(mctx, 1, metric.WithAttributeSet(o.attrs(e, extra...)))
		o.wait.Record(mctx, e.Wait.Seconds(), metric.WithAttributeSet(o.attrs(e, ResultAttr.String(result))))
	case dlock.EventReleased:
		o.holders.Add(mctx, -1, metric.WithAttributeSet(o.attrs(e)))
		o.hold.Record(mctx, e.Held.Seconds(), metric.WithAttributeSet(o.attrs(e, EndAttr.String("released"))))
	case dlock.EventLost:
		o.holders.Add(mctx, -1, metric.WithAttributeSet(o.attrs(e)))
		o.hold.Record(mctx, e.Held.Seconds(), metric.WithAttributeSet(o.attrs(e, EndAttr.String("lost"))))
		o.losses.Add(mctx, 1, metric.WithAttributeSet(o.attrs(e, CauseAttr.String(e.Reason()))))
		if span := trace.SpanFromContext(ctxOf(e)); span.IsRecording() {
			attrs := []attribute.KeyValue{CauseAttr.String(e.Reason())}
			if k := o.spanKey(e.Key); k != "" {
				attrs = append(attrs, KeyAttr.String(k))
			}
			span.AddEvent("dlock.lost", trace.WithAttributes(attrs...))
		}
	case dlock.EventRenewed:
		o.renewals.Add(mctx, 1, metric.WithAttributeSet(o.attrs(e)))
	case dlock.EventRenewFailed:
		o.renewalFailures.Add(mctx, 1, metric.WithAttributeSet(o.attrs(e)))
	}
}

// start begins the span of an acquisition and counts it as a waiter.
func (o *Observer) start(e dlock.Event) {
	attrs := []attribute.KeyValue{ModeAttr.String(e.Mode.String())}
	if k := o.spanKey(e.Key); k != "" {
		attrs = append(attrs, KeyAttr.String(k))
	}
	if e.Limit > 0 {
		attrs = append(attrs, LimitAttr.Int(e.Limit))
	}
	ctx := ctxOf(e)
	_, span := o.tracer.Start(ctx, "dlock.acquire",
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(time.Now()),
		trace.WithAttributes(attrs...))
	w := waiting{span: span, attrs: o.attrs(e)}
	o.mu.Lock()
	o.waiting[e.ID] = w
	o.mu.Unlock()
	o.waiters.Add(context.WithoutCancel(ctx), 1, metric.WithAttributeSet(w.attrs))
}

// finish ends the span of an acquisition whose start was seen, and takes
// it off the waiters.
func (o *Observer) finish(e dlock.Event) {
	o.mu.Lock()
	w, ok := o.waiting[e.ID]
	delete(o.waiting, e.ID)
	o.mu.Unlock()
	if !ok {
		return
	}
	o.waiters.Add(context.WithoutCancel(ctxOf(e)), -1, metric.WithAttributeSet(w.attrs))
	if e.Kind == dlock.EventAcquired {
		w.span.SetAttributes(OutcomeAttr.String("acquired"), TokenAttr.Int64(int64(e.Token)))
	} else {
		reason := e.Reason()
		w.span.SetAttributes(OutcomeAttr.String("not_acquired"), ReasonAttr.String(reason))
		if reason != "held" {
			w.span.SetStatus(codes.Error, reason)
			if e.Err != nil {
				w.span.RecordError(e.Err)
			}
		}
	}
	w.span.End()
}

var _ dlock.Observer = (*Observer)(nil)
