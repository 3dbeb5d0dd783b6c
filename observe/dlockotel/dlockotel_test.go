package dlockotel_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/memdlock"
	"github.com/dlockhq/dlock/observe/dlockotel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

type setup struct {
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	obs    *dlockotel.Observer
}

func newSetup(t *testing.T, opts ...dlockotel.Option) *setup {
	t.Helper()
	s := &setup{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	s.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.reader))
	obs, err := dlockotel.New(append([]dlockotel.Option{dlockotel.WithTracerProvider(s.tp), dlockotel.WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	s.obs = obs
	return s
}

func newClient(t *testing.T, d *memdlock.Driver, obs dlock.Observer) *dlock.Client {
	t.Helper()
	c, err := dlock.New(d, dlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// acquireSpans returns the ended dlock.acquire spans by their parent's name.
func (s *setup) acquireSpans(t *testing.T) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	names := map[[8]byte]string{}
	for _, sp := range s.spans.Ended() {
		names[sp.SpanContext().SpanID()] = sp.Name()
	}
	m := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range s.spans.Ended() {
		if sp.Name() != "dlock.acquire" {
			continue
		}
		parent := names[sp.Parent().SpanID()]
		if _, dup := m[parent]; dup {
			t.Errorf("two acquire spans under %q", parent)
		}
		m[parent] = sp
	}
	return m
}

// metrics collects the data points: name, then the attributes, to the value
// (a histogram's count).
func (s *setup) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := s.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	name := func(n string, set attribute.Set) string {
		return n + "{" + set.Encoded(attribute.DefaultEncoder()) + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[name(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[name(m.Name, p.Attributes)] = float64(p.Count)
					out[name(m.Name+".sum", p.Attributes)] = p.Sum
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

func TestSpans(t *testing.T) {
	s := newSetup(t)
	store := memdlock.New()
	c := newClient(t, store.Share(), s.obs)
	other := newClient(t, store.Share(), s.obs)
	tracer := s.tp.Tracer("test")

	ctx, holder := tracer.Start(context.Background(), "holder")
	l, err := c.Lock(ctx, "orders/1", dlock.WithLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	x, err := c.Lock(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	ctx, busy := tracer.Start(context.Background(), "busy")
	if _, err := other.TryLock(ctx, "x"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock = %v; want ErrNotAcquired", err)
	}
	busy.End()
	ctx, waiter := tracer.Start(context.Background(), "waiter")
	wctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	if _, err := other.Lock(wctx, "x"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock = %v; want DeadlineExceeded", err)
	}
	cancel()
	waiter.End()
	x.Release(context.Background())
	l.Release(context.Background())
	holder.End()

	spans := s.acquireSpans(t)
	h := spans["holder"]
	if h == nil {
		t.Fatalf("no acquire span under the holder's span; spans: %v", spans)
	}
	for k, want := range map[attribute.Key]attribute.Value{
		dlockotel.KeyAttr:     attribute.StringValue("orders/1"),
		dlockotel.ModeAttr:    attribute.StringValue("semaphore"),
		dlockotel.LimitAttr:   attribute.IntValue(2),
		dlockotel.OutcomeAttr: attribute.StringValue("acquired"),
		dlockotel.TokenAttr:   attribute.Int64Value(int64(l.Token())),
	} {
		if got, ok := attr(h, k); !ok || got != want {
			t.Errorf("holder's span: %s = %v; want %v", k, got.Emit(), want.Emit())
		}
	}
	if h.Status().Code == codes.Error {
		t.Errorf("holder's span has status %v", h.Status())
	}
	if h.Parent().TraceID() != holder.SpanContext().TraceID() {
		t.Error("the acquire span is not in the caller's trace")
	}
	b := spans["busy"]
	if b == nil {
		t.Fatal("no acquire span under busy")
	}
	if got, _ := attr(b, dlockotel.ReasonAttr); got.AsString() != "held" || b.Status().Code == codes.Error {
		t.Errorf("busy: reason %q status %v; want held, not an error", got.AsString(), b.Status())
	}
	w := spans["waiter"]
	if w == nil {
		t.Fatal("no acquire span under waiter")
	}
	if got, _ := attr(w, dlockotel.ReasonAttr); got.AsString() != "timeout" || w.Status().Code != codes.Error {
		t.Errorf("waiter: reason %q status %v; want timeout, an error", got.AsString(), w.Status())
	}
	if d := w.EndTime().Sub(w.StartTime()); d < 30*time.Millisecond {
		t.Errorf("waiter's span lasted %v; want the 30ms wait", d)
	}
	if _, ok := attr(w, dlockotel.TokenAttr); ok {
		t.Error("a span that did not acquire has a token")
	}
}

// Waits for one key at once: each span ends with its own outcome, under its
// own caller's span.
func TestConcurrentSpans(t *testing.T) {
	s := newSetup(t)
	store := memdlock.New()
	tracer := s.tp.Tracer("test")
	const n = 6
	tokens := make([]uint64, n)
	var wg sync.WaitGroup
	for i := range n {
		c := newClient(t, store.Share(), s.obs)
		wg.Go(func() {
			ctx, span := tracer.Start(context.Background(), fmt.Sprint("caller", i))
			defer span.End()
			l, err := c.Lock(ctx, "k")
			if err != nil {
				t.Error(err)
				return
			}
			tokens[i] = l.Token()
			time.Sleep(2 * time.Millisecond)
			l.Release(context.Background())
		})
	}
	wg.Wait()
	spans := s.acquireSpans(t)
	for i := range n {
		sp := spans[fmt.Sprint("caller", i)]
		if sp == nil {
			t.Errorf("caller%d: no acquire span", i)
			continue
		}
		if got, _ := attr(sp, dlockotel.TokenAttr); got.AsInt64() != int64(tokens[i]) {
			t.Errorf("caller%d: span token %d; the lock's is %d", i, got.AsInt64(), tokens[i])
		}
	}
	m := s.metrics(t)
	if got := m[`dlock.waiters{dlock.mode=exclusive}`]; got != 0 {
		t.Errorf("waiters = %v after every wait ended", got)
	}
	if got := m[`dlock.acquisitions{dlock.mode=exclusive,dlock.result=acquired}`]; got != n {
		t.Errorf("acquisitions = %v; want %d", got, n)
	}
}

func TestMetrics(t *testing.T) {
	s := newSetup(t, dlockotel.WithKeyAttribute(func(string) string { return "jobs" }), dlockotel.WithSpanKey(func(string) string { return "" }))
	store := memdlock.New()
	c := newClient(t, store.Share(), s.obs)
	ctx := context.Background()
	l, err := c.Lock(ctx, "job/1", dlock.WithTTL(60*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		close(started)
		if w, err := c.Lock(ctx, "job/1"); err == nil {
			w.Release(ctx)
		}
	}()
	<-started
	deadline := time.Now().Add(10 * time.Second)
	for s.metrics(t)[`dlock.waiters{dlock.key=jobs,dlock.mode=exclusive}`] != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never showed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := s.metrics(t)[`dlock.holders{dlock.key=jobs,dlock.mode=exclusive}`]; got != 1 {
		t.Errorf("holders = %v while held", got)
	}
	time.Sleep(70 * time.Millisecond)
	l.Release(ctx)
	<-done
	j, err := c.Lock(ctx, "job/2", dlock.WithMaxHold(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	<-j.Done()
	lossKey := `dlock.losses{dlock.cause=max_hold,dlock.key=jobs,dlock.mode=exclusive}`
	for s.metrics(t)[lossKey] != 1 {
		if time.Now().After(deadline) {
			t.Fatal("no loss counted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	m := s.metrics(t)
	for series, want := range map[string]float64{
		`dlock.acquisitions{dlock.key=jobs,dlock.mode=exclusive,dlock.result=acquired}`:  3,
		`dlock.wait.duration{dlock.key=jobs,dlock.mode=exclusive,dlock.result=acquired}`: 3,
		`dlock.hold.duration{dlock.end=released,dlock.key=jobs,dlock.mode=exclusive}`:    2,
		`dlock.hold.duration{dlock.end=lost,dlock.key=jobs,dlock.mode=exclusive}`:        1,
		`dlock.holders{dlock.key=jobs,dlock.mode=exclusive}`:                             0,
		`dlock.waiters{dlock.key=jobs,dlock.mode=exclusive}`:                             0,
		lossKey: 1,
	} {
		if got, ok := m[series]; !ok || got != want {
			t.Errorf("%s = %v (present: %v); want %v", series, got, ok, want)
		}
	}
	if got := m[`dlock.renewals{dlock.key=jobs,dlock.mode=exclusive}`]; got < 2 {
		t.Errorf("renewals = %v; want at least 2", got)
	}
	if got := m[`dlock.hold.duration.sum{dlock.end=released,dlock.key=jobs,dlock.mode=exclusive}`]; got < 0.07 {
		t.Errorf("hold seconds = %v; want at least 0.07", got)
	}
	for _, sp := range s.spans.Ended() {
		if _, ok := attr(sp, dlockotel.KeyAttr); ok {
			t.Errorf("span %s has the key although WithSpanKey drops it", sp.Name())
		}
	}
}

// A loss is an event on the span of the call that acquired the lock.
func TestLossEvent(t *testing.T) {
	s := newSetup(t)
	c := newClient(t, memdlock.New(), s.obs)
	ctx, span := s.tp.Tracer("test").Start(context.Background(), "job")
	l, err := c.Lock(ctx, "k", dlock.WithMaxHold(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	time.Sleep(50 * time.Millisecond) // the event follows the context's end
	span.End()
	for _, sp := range s.spans.Ended() {
		if sp.Name() != "job" {
			continue
		}
		for _, ev := range sp.Events() {
			if ev.Name == "dlock.lost" {
				return
			}
		}
		t.Errorf("job span events: %v; want dlock.lost", sp.Events())
		return
	}
	t.Error("no job span")
}
