package dataplane

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
)

// durationBuckets are the bounds, in seconds, of repool_grpc_server_handling_seconds:
// an in-memory call takes tens of microseconds, one that waits for the
// lease journal a few milliseconds, one that waits for the store longer.
var durationBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// okSeries are a method's series of code OK, looked up once.
type okSeries struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

// newRED returns the calls' counter and duration histogram by method and
// code, and their series of code OK for every data-plane method: they
// exist, at 0, from the start (a rate over a series that appears with its
// first call misses that call), and the hot path finds them in a map that
// is never written after New. The label sets are bounded: the methods of
// AuthService and PoolService times the gRPC codes.
func newRED() (*prometheus.CounterVec, *prometheus.HistogramVec, map[string]okSeries) {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "repool_grpc_requests_total", Help: "Data-plane calls by method and gRPC code.",
	}, []string{"method", "code"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "repool_grpc_server_handling_seconds",
		Help:    "Time from a data-plane call's arrival to its answer, by method and gRPC code (a stream's: its lifetime).",
		Buckets: durationBuckets,
	}, []string{"method", "code"})
	ok := map[string]okSeries{}
	for _, sd := range []grpc.ServiceDesc{repoolv1.AuthService_ServiceDesc, repoolv1.PoolService_ServiceDesc} {
		var names []string
		for _, m := range sd.Methods {
			names = append(names, m.MethodName)
		}
		for _, st := range sd.Streams {
			names = append(names, st.StreamName)
		}
		for _, n := range names {
			method := "/" + sd.ServiceName + "/" + n
			ok[method] = okSeries{
				count:    requests.WithLabelValues(method, codes.OK.String()),
				duration: duration.WithLabelValues(method, codes.OK.String()),
			}
		}
	}
	return requests, duration, ok
}

// count counts a data-plane answer by method and code, and observes how
// long it took since start.
func (s *Service) count(method string, err error, start time.Time) {
	d := time.Since(start).Seconds()
	if err == nil {
		if c, ok := s.ok[method]; ok {
			c.count.Inc()
			c.duration.Observe(d)
			return
		}
	}
	code := status.Code(err).String()
	s.requests.WithLabelValues(method, code).Inc()
	s.duration.WithLabelValues(method, code).Observe(d)
}

// logCall logs one data-plane call at debug level: its method, code and
// duration, with the call's context, so that the line carries its trace id
// (tracing.LogHandler). Nothing is built when debug is off.
func (s *Service) logCall(ctx context.Context, method string, err error, start time.Time) {
	if !s.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	s.log.DebugContext(ctx, "call", "method", method, "code", status.Code(err).String(), "duration_ms", float64(time.Since(start).Microseconds())/1000)
}
