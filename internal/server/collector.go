package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/tenants"
)

// poolCollector exports per-tenant pool gauges and counters.
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
)

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descResources, descCells, descLeases, descAcquired, descExhausted, descQuarant, descRecovered, descExpired, descDropped} {
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
	})
}
