package token

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/repool/repool/internal/sidecar/perprovider"
)

// Token tiers, the values of the tier label: where a token came from.
const (
	TierLocal = "local"
	TierRedis = "redis"
	TierIssue = "issue"
)

// Refresh reasons, the values of the reason label.
const (
	reasonAhead           = "ahead"           // refresh-ahead of expiry
	reasonMiss            = "miss"            // no usable token
	reasonUnauthenticated = "unauthenticated" // the server refused the token
)

// Metrics are the token layer's Prometheus metrics, labelled by provider.
// Create them once per registry and share them between all sources.
type Metrics struct {
	lookups     *prometheus.CounterVec
	issuances   *prometheus.CounterVec
	refreshes   *prometheus.CounterVec
	redisErrors *prometheus.CounterVec

	perprovider.Vecs // every vector above: registered, and forgotten (Forget)
}

// NewMetrics creates the metrics and registers them on reg unless reg is
// nil. It panics if they are already registered on reg (a wiring bug).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "repool_sidecar_token_lookups_total",
			Help: "Tokens served, by the tier that served them: local (in-process cache), redis (shared cache) or issue (AuthService.IssueToken).",
		}, []string{"provider", "tier"}),
		issuances: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "repool_sidecar_token_issuances_total",
			Help: "AuthService.IssueToken calls, by gRPC code.",
		}, []string{"provider", "code"}),
		refreshes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "repool_sidecar_token_refreshes_total",
			Help: "Token fetches past the local cache (to Redis, then IssueToken), one per single flight, by the reason of the caller that started it: ahead (before expiry), miss (no usable token), unauthenticated (the server refused the token).",
		}, []string{"provider", "reason"}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "repool_sidecar_redis_errors_total",
			Help: "Failed operations on the shared token cache in Redis, by operation.",
		}, []string{"provider", "op"}),
	}
	m.Vecs = perprovider.Vecs{m.lookups, m.issuances, m.refreshes, m.redisErrors}
	m.Register(reg)
	return m
}
