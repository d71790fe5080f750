// Package tracing carries W3C trace context (traceparent, tracestate)
// across the hop from a backend through the sidecar to the server, puts
// the trace id on every log line written with the request's context, and,
// as an option that is off by default, exports OpenTelemetry spans of both
// sides over OTLP/HTTP.
//
// Off (no OTLP endpoint), it costs a header parse and a metadata entry per
// call: the sidecar takes the backend's traceparent (or makes one), gives
// the call a span id of its own and sends it as gRPC metadata; the server
// reads it only when it logs. On, the contrib instrumentation does the
// same (otelhttp on the sidecar's HTTP API, otelgrpc on both ends of the
// gRPC hop) and records spans, batched to the endpoint. No global state:
// each Tracer holds its own provider and propagator.
package tracing

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Config configures a Tracer.
type Config struct {
	// OTLPEndpoint is the OTLP/HTTP collector's base URL
	// (http://collector:4318 or https://...); spans go to its
	// /v1/traces. Empty: no spans are recorded or exported (the default);
	// trace context is still carried and logged.
	OTLPEndpoint string
	// Service names this process in its spans (service.name): "repool-server",
	// "repool-sidecar".
	Service string
	// Exporter, when set, replaces the OTLP exporter (tests: the SDK's
	// in-memory exporter); it turns spans on like OTLPEndpoint.
	Exporter sdktrace.SpanExporter
}

// CheckEndpoint says what is wrong with an OTLP endpoint ("" is fine:
// off).
func CheckEndpoint(endpoint string) error {
	if endpoint == "" {
		return nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("OTLP endpoint %q: want http://HOST:PORT or https://HOST:PORT (the collector's OTLP/HTTP port, 4318 by default)", endpoint)
	}
	return nil
}

// Tracer is one process's tracing. The nil *Tracer is tracing off.
type Tracer struct {
	tp   *sdktrace.TracerProvider // nil: spans off
	prop propagation.TextMapPropagator
}

// propagator is W3C trace context: traceparent and tracestate.
var propagator = propagation.TraceContext{}

// New returns the Tracer cfg describes: with spans exported when
// cfg.OTLPEndpoint or cfg.Exporter is set, carrying and logging trace
// context only otherwise.
func New(cfg Config) (*Tracer, error) {
	t := &Tracer{prop: propagator}
	if cfg.OTLPEndpoint == "" && cfg.Exporter == nil {
		return t, nil
	}
	exp := cfg.Exporter
	if exp == nil {
		if err := CheckEndpoint(cfg.OTLPEndpoint); err != nil {
			return nil, err
		}
		var err error
		if exp, err = otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(cfg.OTLPEndpoint+"/v1/traces")); err != nil {
			return nil, fmt.Errorf("OTLP exporter: %w", err)
		}
	}
	res := resource.NewSchemaless(attribute.String("service.name", cfg.Service))
	// The backend's sampling decision is kept (ParentBased); a trace the
	// sidecar starts is sampled.
	t.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	return t, nil
}

// Spans reports whether spans are recorded and exported.
func (t *Tracer) Spans() bool { return t != nil && t.tp != nil }

// Shutdown exports the spans still buffered and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if !t.Spans() {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// HTTPHandler wraps h so that each request's context holds its span
// context: the caller's traceparent (and tracestate), or a new trace, with
// a span id of this hop. With spans on it is otelhttp's handler, named
// operation.
func (t *Tracer) HTTPHandler(h http.Handler, operation string) http.Handler {
	if t.Spans() {
		return otelhttp.NewHandler(h, operation, otelhttp.WithTracerProvider(t.tp), otelhttp.WithPropagators(t.prop))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		h.ServeHTTP(w, r.WithContext(trace.ContextWithSpanContext(ctx, child(trace.SpanContextFromContext(ctx)))))
	})
}

// child is a span context for this hop under parent: the parent's trace
// id, flags and state with a new span id, or a new trace (not sampled)
// when parent is not valid.
func child(parent trace.SpanContext) trace.SpanContext {
	cfg := trace.SpanContextConfig{TraceID: parent.TraceID(), TraceFlags: parent.TraceFlags(), TraceState: parent.TraceState()}
	if !parent.IsValid() {
		cfg = trace.SpanContextConfig{}
		for !cfg.TraceID.IsValid() {
			rand.Read(cfg.TraceID[:])
		}
	}
	for !cfg.SpanID.IsValid() {
		rand.Read(cfg.SpanID[:])
	}
	return trace.NewSpanContext(cfg)
}

// DialOptions are the gRPC client's options that send the call's trace
// context as metadata (traceparent, tracestate): otelgrpc's client handler
// with spans on, an interceptor otherwise.
func (t *Tracer) DialOptions() []grpc.DialOption {
	if t.Spans() {
		return []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler(
			otelgrpc.WithTracerProvider(t.tp), otelgrpc.WithPropagators(t.prop)))}
	}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(inject(ctx), method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(inject(ctx), desc, cc, method, opts...)
		}),
	}
}

// inject adds ctx's span context to its outgoing metadata.
func inject(ctx context.Context) context.Context {
	parent, state := Header(ctx)
	if parent == "" {
		return ctx
	}
	kv := []string{"traceparent", parent}
	if state != "" {
		kv = append(kv, "tracestate", state)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// Header returns ctx's span context as W3C traceparent and tracestate
// values, "" when it has none: what a call sent where there is no
// metadata of its own (a call on a Leases stream) carries.
func Header(ctx context.Context) (traceparent, tracestate string) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return "", ""
	}
	return formatTraceparent(sc), sc.TraceState().String()
}

// formatTraceparent writes sc as a W3C traceparent value (version 00), as the
// propagator does (the flags it knows, sampled and random), with one
// allocation: Header runs on every call sent on a Leases stream.
func formatTraceparent(sc trace.SpanContext) string {
	var b [55]byte // 00-<32 hex>-<16 hex>-<2 hex>
	tid, sid := sc.TraceID(), sc.SpanID()
	flags := [1]byte{byte(sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom))}
	copy(b[:], "00-")
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], flags[:])
	return string(b[:])
}

// WithHeader returns ctx carrying the remote span context of the W3C
// traceparent and tracestate values (Header's), or ctx itself when
// traceparent is empty or malformed.
func WithHeader(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	c := propagation.MapCarrier{"traceparent": traceparent}
	if tracestate != "" {
		c["tracestate"] = tracestate
	}
	return propagator.Extract(ctx, c)
}

// ServerOptions are the gRPC server's options: otelgrpc's server handler
// with spans on; none otherwise (TraceID reads the metadata when a line
// is logged).
func (t *Tracer) ServerOptions() []grpc.ServerOption {
	if t.Spans() {
		return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithTracerProvider(t.tp), otelgrpc.WithPropagators(t.prop)))}
	}
	return nil
}

// metadataCarrier reads incoming gRPC metadata as a TextMapCarrier.
type metadataCarrier metadata.MD

func (m metadataCarrier) Get(key string) string {
	if v := metadata.MD(m).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (m metadataCarrier) Set(key, value string) { metadata.MD(m).Set(key, value) }

func (m metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// SpanContext is the request's span context: the one in ctx (the
// sidecar's hop, or a span otelgrpc started), else the traceparent of the
// incoming gRPC call's metadata; not valid when there is none.
func SpanContext(ctx context.Context) trace.SpanContext {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return sc
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		return trace.SpanContextFromContext(propagator.Extract(ctx, metadataCarrier(md)))
	}
	return trace.SpanContext{}
}

// LogHandler adds trace_id and span_id to every record logged with a
// context that has a span context (SpanContext): the log calls that take
// a context (InfoContext, Log) of a request.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx != nil {
		if sc := SpanContext(ctx); sc.IsValid() {
			r = r.Clone()
			r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
		}
	}
	return l.Handler.Handle(ctx, r)
}

func (l logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return logHandler{l.Handler.WithAttrs(as)}
}
func (l logHandler) WithGroup(name string) slog.Handler { return logHandler{l.Handler.WithGroup(name)} }
