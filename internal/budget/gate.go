package budget

import "log/slog"

// Gate charges one tenant's pool to the budget: it is the pool.Gate that
// a pool is made with, so the pool reserves what it creates and releases
// what it removes under its own lock, and the budget counts exactly what
// the pool holds however calls race. Make one with Budget.Gate.
type Gate struct {
	b      *Budget
	tenant string
	log    *slog.Logger
}

// Gate returns the gate that charges tenant's pool to b. Releases the
// budget refuses (a bug in the pool's bookkeeping: they are also counted
// in Total.OverReleased) are logged to log; nil discards them.
func (b *Budget) Gate(tenant string, log *slog.Logger) Gate {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return Gate{b: b, tenant: tenant, log: log}
}

// Reserve takes resources and then cells from the tenant's budget, both or
// neither: it returns Reserve's error (wrapping ErrExhausted when a bound
// refused) and takes nothing.
func (g Gate) Reserve(resources, cells int) error {
	if resources > 0 {
		if err := g.b.Reserve(g.tenant, Resources, int64(resources)); err != nil {
			return err
		}
	}
	if cells > 0 {
		if err := g.b.Reserve(g.tenant, Cells, int64(cells)); err != nil {
			if resources > 0 {
				g.release(Resources, resources)
			}
			return err
		}
	}
	return nil
}

// Release gives back resources and cells the pool no longer holds.
func (g Gate) Release(resources, cells int) {
	g.release(Resources, resources)
	g.release(Cells, cells)
}

func (g Gate) release(k Kind, n int) {
	if n <= 0 {
		return
	}
	if err := g.b.Release(g.tenant, k, int64(n)); err != nil {
		g.log.Error("budget release", "tenant", g.tenant, "kind", k.String(), "err", err)
	}
}
