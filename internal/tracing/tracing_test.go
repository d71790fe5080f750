package tracing

import (
	"context"
	"crypto/rand"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Header writes what the W3C propagator writes, and WithHeader reads it
// back as the propagator does.
func TestHeaderIsThePropagatorsTraceparent(t *testing.T) {
	state, err := trace.ParseTraceState("vendor=a,other=b")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 512 { // every flags byte, twice
		cfg := trace.SpanContextConfig{Remote: true}
		rand.Read(cfg.TraceID[:])
		rand.Read(cfg.SpanID[:])
		cfg.TraceFlags = trace.TraceFlags(i % 256)
		if i%3 == 0 {
			cfg.TraceState = state
		}
		sc := trace.NewSpanContext(cfg)
		ctx := trace.ContextWithSpanContext(context.Background(), sc)
		want := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, want)
		parent, ts := Header(ctx)
		if parent != want["traceparent"] || ts != want["tracestate"] {
			t.Fatalf("Header = %q, %q; the propagator writes %q, %q", parent, ts, want["traceparent"], want["tracestate"])
		}
		back := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), want))
		if got := trace.SpanContextFromContext(WithHeader(context.Background(), parent, ts)); !got.Equal(back) {
			t.Fatalf("WithHeader(Header) = %v, want what the propagator reads back, %v", got, back)
		}
	}
	if p, s := Header(context.Background()); p != "" || s != "" {
		t.Fatalf("Header of a context without a span = %q, %q, want empty", p, s)
	}
}
