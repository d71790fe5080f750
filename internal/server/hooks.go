package server

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repool/repool/internal/budget"
	"github.com/repool/repool/internal/control"
	"github.com/repool/repool/internal/dataplane"
	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/tenants"
)

// hooks keeps the in-memory state in step with control-plane changes.
type hooks struct{ s *Server }

var _ control.Hooks = hooks{}

// ApplyLimits validates and applies new limits live.
func (h hooks) ApplyLimits(tenant string, l store.Limits) error { return h.s.applyLimits(tenant, l) }

// TenantStatusChanged drops cached credentials and, on suspension, ends the
// tenant's event streams and refuses new ones (a stream admitted just
// before the suspension included) until the tenant is reactivated.
func (h hooks) TenantStatusChanged(tenant string, st store.Status) {
	h.s.auth.Invalidate(tenant)
	p, ok := h.s.pools.Lookup(tenant)
	if !ok {
		return
	}
	switch st {
	case store.StatusSuspended:
		p.CloseSubscriptions(dataplane.ErrTenantSuspended)
	case store.StatusActive:
		p.OpenSubscriptions()
	}
}

// TenantDeleted runs after the delete committed: it drops the pool for
// good (a call admitted before the delete cannot create a new one; tenant
// ids are never reused), closes it, so that a call that already holds it
// changes nothing and charges no budget from now on, and only then returns
// the tenant's budget.
func (h hooks) TenantDeleted(tenant string) {
	h.s.auth.Invalidate(tenant)
	if p := h.s.pools.Remove(tenant); p != nil {
		p.Close(fmt.Errorf("tenant %s: %w", tenant, tenants.ErrDeleted))
	}
	h.s.cp.Forget(tenant)
	h.s.budget.Forget(tenant)
	h.s.limiter.Forget(tenant)
	h.s.limitsMu.Lock()
	delete(h.s.limits, tenant)
	h.s.limitsMu.Unlock()
}

// KeyRevoked drops cached credentials so the key fails at once.
func (h hooks) KeyRevoked(tenant, _ string) { h.s.auth.Invalidate(tenant) }

// budgetGate adapts budget.Budget to the data plane's Budget.
type budgetGate struct {
	b   *budget.Budget
	log *slog.Logger
}

func kind(k dataplane.Kind) budget.Kind {
	if k == dataplane.Cells {
		return budget.Cells
	}
	return budget.Resources
}

func (g budgetGate) Reserve(tenant string, k dataplane.Kind, n int) error {
	err := g.b.Reserve(tenant, kind(k), int64(n))
	if errors.Is(err, budget.ErrExhausted) {
		return fmt.Errorf("%w: %v", dataplane.ErrOverBudget, err)
	}
	return err
}

func (g budgetGate) Release(tenant string, k dataplane.Kind, n int) {
	if n == 0 {
		return
	}
	if err := g.b.Release(tenant, kind(k), int64(n)); err != nil {
		g.log.Error("budget release", "tenant", tenant, "err", err)
	}
}

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
