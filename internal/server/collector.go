package server

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/tenants"
)

// poolCollector exports per-tenant pool gauges and counters: every series
// of a tenant exists from the pool's creation (counters start at 0), and
// there are at most 14 per tenant (reports_total has 3 outcomes).
type poolCollector struct{ pools *tenants.Registry }

var (
	descResources = prometheus.NewDesc("repool_pool_resources", "Resources in the tenant's pool.", []string{"tenant"}, nil)
	descCells     = prometheus.NewDesc("repool_pool_cells", "Cells in the tenant's pool.", []string{"tenant"}, nil)
	descLeases    = prometheus.NewDesc("repool_pool_leases", "Outstanding leases of the tenant.", []string{"tenant"}, nil)
	descAcquired  = prometheus.NewDesc("repool_pool_acquired_total", "Leases granted.", []string{"tenant"}, nil)
	descExhausted = prometheus.NewDesc("repool_pool_exhausted_total", "Acquires refused for lack of a free resource.", []string{"tenant"}, nil)
	descQuarant   = prometheus.NewDesc("repool_pool_quarantined_total", "Quarantines started.", []string{"tenant"}, nil)
	descRecovered = prometheus.NewDesc("repool_pool_recovered_total", "Quarantines ended by a successful probe.", []string{"tenant"}, nil)
	descExpired   = prometheus.NewDesc("repool_pool_leases_expired_total", "Leases that expired.", []string{"tenant"}, nil)
	descDropped   = prometheus.NewDesc("repool_pool_slow_subscribers_total", "Event subscribers disconnected for being slow.", []string{"tenant"}, nil)
	descQuarRes   = prometheus.NewDesc("repool_pool_quarantined_resources", "Resources quarantined now for every context (blocked, awaiting a probe or being probed).", []string{"tenant"}, nil)
	descQuarCells = prometheus.NewDesc("repool_pool_quarantined_cells", "Cells (a resource in one context) quarantined now.", []string{"tenant"}, nil)
	descReports   = prometheus.NewDesc("repool_pool_reports_total", "Outcomes reported (Report, and Release with an outcome), by outcome: success, failure, blocked.", []string{"tenant", "outcome"}, nil)
)

// outcomes are the outcome label's values, one per pool.Outcome.
var outcomes = []pool.Outcome{pool.Success, pool.Failure, pool.Blocked}

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descResources, descCells, descLeases, descAcquired, descExhausted, descQuarant, descRecovered, descExpired, descDropped, descQuarRes, descQuarCells, descReports} {
		ch <- d
	}
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	c.pools.Each(func(t string, p *pool.Pool) {
		r, cells := p.Len()
		n := p.Counters()
		ch <- prometheus.MustNewConstMetric(descResources, prometheus.GaugeValue, float64(r), t)
		ch <- prometheus.MustNewConstMetric(descCells, prometheus.GaugeValue, float64(cells), t)
		ch <- prometheus.MustNewConstMetric(descLeases, prometheus.GaugeValue, float64(p.ActiveLeases()), t)
		ch <- prometheus.MustNewConstMetric(descAcquired, prometheus.CounterValue, float64(n.Acquired), t)
		ch <- prometheus.MustNewConstMetric(descExhausted, prometheus.CounterValue, float64(n.Exhausted), t)
		ch <- prometheus.MustNewConstMetric(descQuarant, prometheus.CounterValue, float64(n.Quarantined), t)
		ch <- prometheus.MustNewConstMetric(descRecovered, prometheus.CounterValue, float64(n.Recovered), t)
		ch <- prometheus.MustNewConstMetric(descExpired, prometheus.CounterValue, float64(n.Expired), t)
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(n.DroppedEvents), t)
		qr, qc := p.Quarantined()
		ch <- prometheus.MustNewConstMetric(descQuarRes, prometheus.GaugeValue, float64(qr), t)
		ch <- prometheus.MustNewConstMetric(descQuarCells, prometheus.GaugeValue, float64(qc), t)
		for _, o := range outcomes {
			ch <- prometheus.MustNewConstMetric(descReports, prometheus.CounterValue, float64(n.Outcomes[o]), t, strings.ToLower(o.String()))
		}
	})
}
