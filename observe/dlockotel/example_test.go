package dlockotel_test

import (
	"context"
	"fmt"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/memdlock"
	"github.com/dlockhq/dlock/observe/dlockotel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func Example() {
	// In a service these are the providers set up at start (often the
	// global ones, which New uses by default) with real exporters; here
	// they keep what they record in memory.
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	obs, err := dlockotel.New(dlockotel.WithTracerProvider(tp), dlockotel.WithMeterProvider(mp))
	if err != nil {
		panic(err)
	}
	client, err := dlock.New(memdlock.New(), dlock.WithObserver(obs))
	if err != nil {
		panic(err)
	}
	defer client.Close()

	// The acquisition's span is a child of the span in the context.
	ctx, request := tp.Tracer("example").Start(context.Background(), "handle request")
	err = client.Do(ctx, "invoices/42", func(ctx context.Context, l *dlock.Lock) error {
		return nil // the work the lock protects
	})
	if err != nil {
		panic(err)
	}
	request.End()

	for _, s := range spans.Ended() {
		fmt.Println(s.Name(), s.Parent().SpanID() == request.SpanContext().SpanID())
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "dlock.acquisitions" {
			fmt.Println(m.Name, sum.DataPoints[0].Value)
		}
	}
	// Output:
	// dlock.acquire true
	// handle request false
	// dlock.acquisitions 1
}
