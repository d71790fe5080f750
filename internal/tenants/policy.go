package tenants

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/repool/repool/internal/defaults"
	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/store"
)

// Policy is a quarantine and decay policy: the server-wide one that every
// tenant's pool starts with (flags --half-life, --quarantine-after, ...),
// overlaid with a tenant's own values (ForTenant). The zero
// value of a field means the pool's default (pool.Config).
type Policy struct {
	// HalfLife: an observation's weight halves after this long.
	HalfLife time.Duration
	// QuarantineAfter: consecutive failures in one context that quarantine
	// the resource for that context.
	QuarantineAfter int
	// QuarantineWholeAfter: consecutive failures over all contexts that
	// quarantine the whole resource.
	QuarantineWholeAfter int
	// QuarantineBelow: a context's success rate (posterior mean) under
	// which the resource is quarantined for it once it has
	// QuarantineMinEvidence observations; negative turns the rule off.
	QuarantineBelow float64
	// QuarantineMinEvidence: the decayed observations QuarantineBelow needs.
	QuarantineMinEvidence float64
	// CooldownBase: the first quarantine's length; each relapse doubles it,
	// up to CooldownMax. A probe lease is handed out when it ends.
	CooldownBase time.Duration
	CooldownMax  time.Duration
}

// PolicyDefaults fills p's zero fields with the pool's defaults.
func PolicyDefaults(p Policy) Policy {
	d := pool.Config{}.WithDefaults()
	return defaults.Fill(p, Policy{
		HalfLife: d.HalfLife, QuarantineAfter: d.FailuresToQuarantine, QuarantineWholeAfter: d.FailuresToQuarantineWhole,
		QuarantineBelow: d.QuarantineBelow, QuarantineMinEvidence: d.QuarantineMinEvidence,
		CooldownBase: d.CooldownBase, CooldownMax: d.CooldownMax,
	})
}

// Validate names the first field out of its range, by its configuration
// key, after defaults.
func (p Policy) Validate() error {
	p = PolicyDefaults(p)
	switch {
	case p.HalfLife < pool.MinHalfLife || p.HalfLife > pool.MaxHalfLife:
		return fmt.Errorf("config: half_life %v: want %s to %s (30 days)", p.HalfLife, short(pool.MinHalfLife), short(pool.MaxHalfLife))
	case p.QuarantineAfter < 1 || p.QuarantineAfter > pool.MaxFailuresToQuarantine:
		return fmt.Errorf("config: quarantine_after %d: want 1 to %d consecutive failures", p.QuarantineAfter, pool.MaxFailuresToQuarantine)
	case p.QuarantineWholeAfter < 1 || p.QuarantineWholeAfter > pool.MaxFailuresToQuarantineWhole:
		return fmt.Errorf("config: quarantine_whole_after %d: want 1 to %d consecutive failures", p.QuarantineWholeAfter, pool.MaxFailuresToQuarantineWhole)
	case math.IsNaN(p.QuarantineBelow) || p.QuarantineBelow >= 1 || p.QuarantineBelow < -1:
		return fmt.Errorf("config: quarantine_below %v: want a success rate below 1 (0.1 is 10%%), or -1 to turn the rule off", p.QuarantineBelow)
	case math.IsNaN(p.QuarantineMinEvidence) || p.QuarantineMinEvidence < 1 || p.QuarantineMinEvidence > pool.MaxQuarantineMinEvidence:
		return fmt.Errorf("config: quarantine_min_evidence %v: want 1 to %.0f observations", p.QuarantineMinEvidence, pool.MaxQuarantineMinEvidence)
	case p.CooldownBase < pool.MinCooldown || p.CooldownBase > pool.MaxCooldownBase:
		return fmt.Errorf("config: cooldown_base %v: want %s to %s", p.CooldownBase, short(pool.MinCooldown), short(pool.MaxCooldownBase))
	case p.CooldownMax < p.CooldownBase || p.CooldownMax > pool.MaxCooldownMax:
		return fmt.Errorf("config: cooldown_max %v: want cooldown_base (%v) to %s (30 days)", p.CooldownMax, p.CooldownBase, short(pool.MaxCooldownMax))
	}
	return nil
}

// ForTenant returns p, the server-wide policy, overlaid with a tenant's
// own values (store.Policy: nil means the server-wide value).
func (p Policy) ForTenant(t store.Policy) Policy {
	p = PolicyDefaults(p)
	sec := func(d *time.Duration, v *int64) {
		if v != nil {
			*d = time.Duration(*v) * time.Second
		}
	}
	whole := func(n *int, v *int64) {
		if v != nil {
			*n = int(*v)
		}
	}
	sec(&p.HalfLife, t.HalfLifeSeconds)
	whole(&p.QuarantineAfter, t.QuarantineAfter)
	whole(&p.QuarantineWholeAfter, t.QuarantineWholeAfter)
	if t.QuarantineBelow != nil {
		p.QuarantineBelow = *t.QuarantineBelow
	}
	if t.QuarantineMinEvidence != nil {
		p.QuarantineMinEvidence = *t.QuarantineMinEvidence
	}
	sec(&p.CooldownBase, t.CooldownBaseSeconds)
	sec(&p.CooldownMax, t.CooldownMaxSeconds)
	return p
}

// Stored returns p as the control plane shows the server-wide default
// policy: durations in whole seconds, a negative quarantine_below as -1
// (off).
func (p Policy) Stored() store.Policy {
	p = PolicyDefaults(p)
	secs := func(d time.Duration) *int64 { v := int64(d / time.Second); return &v }
	whole := func(n int) *int64 { v := int64(n); return &v }
	below, evidence := p.QuarantineBelow, p.QuarantineMinEvidence
	if below < 0 {
		below = -1
	}
	return store.Policy{
		HalfLifeSeconds: secs(p.HalfLife), QuarantineAfter: whole(p.QuarantineAfter), QuarantineWholeAfter: whole(p.QuarantineWholeAfter),
		QuarantineBelow: &below, QuarantineMinEvidence: &evidence,
		CooldownBaseSeconds: secs(p.CooldownBase), CooldownMaxSeconds: secs(p.CooldownMax),
	}
}

// PoolPolicy is p as a running pool takes it (pool.SetPolicy).
func (p Policy) PoolPolicy() pool.Policy {
	c := p.PoolConfig(pool.Config{})
	return pool.Policy{
		HalfLife: c.HalfLife, FailuresToQuarantine: c.FailuresToQuarantine, FailuresToQuarantineWhole: c.FailuresToQuarantineWhole,
		QuarantineBelow: c.QuarantineBelow, QuarantineMinEvidence: c.QuarantineMinEvidence,
		CooldownBase: c.CooldownBase, CooldownMax: c.CooldownMax,
	}
}

// PoolConfig is the pool configuration of p.
func (p Policy) PoolConfig(c pool.Config) pool.Config {
	p = PolicyDefaults(p)
	c.HalfLife, c.FailuresToQuarantine, c.FailuresToQuarantineWhole = p.HalfLife, p.QuarantineAfter, p.QuarantineWholeAfter
	c.QuarantineBelow, c.QuarantineMinEvidence = p.QuarantineBelow, p.QuarantineMinEvidence
	c.CooldownBase, c.CooldownMax = p.CooldownBase, p.CooldownMax
	return c
}

// short writes a whole number of minutes or hours without the zero units
// (1m, 720h, not 1m0s, 720h0m0s).
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
