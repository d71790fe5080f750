package server

import (
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// tenantLabel is the label of every per-tenant series.
const tenantLabel = "tenant"

// metricsHandler serves GET /metrics. Per-tenant series (those with a
// tenant label) name every tenant with its counts, so they go only to a
// caller on a loopback address or one with a control-plane token of role
// operator or metrics; anyone else gets every other series (process, Go,
// gRPC, HA and checkpoint totals).
func (s *Server) metricsHandler() http.Handler {
	opts := promhttp.HandlerOpts{Registry: s.reg}
	full := promhttp.HandlerFor(s.reg, opts)
	public := promhttp.HandlerFor(withoutLabel{s.reg, tenantLabel}, opts)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if loopbackPeer(r) || s.control.ReadsTenantMetrics(r) {
			full.ServeHTTP(w, r)
			return
		}
		public.ServeHTTP(w, r)
	})
}

// loopbackPeer reports whether the request's connection comes from a
// loopback address.
func loopbackPeer(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// withoutLabel gathers from g every series that does not carry label.
type withoutLabel struct {
	g     prometheus.Gatherer
	label string
}

func (f withoutLabel) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := f.g.Gather()
	out := mfs[:0]
	for _, mf := range mfs {
		kept := mf.Metric[:0]
		for _, m := range mf.Metric {
			if !hasLabel(m, f.label) {
				kept = append(kept, m)
			}
		}
		if len(kept) > 0 {
			mf.Metric = kept
			out = append(out, mf)
		}
	}
	return out, err
}

func hasLabel(m *dto.Metric, name string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return true
		}
	}
	return false
}
