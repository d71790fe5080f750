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

// Policy is a quarantine, decay, objective and retirement policy: the server-wide one that every
// tenant's pool starts with (flags --half-life, --quarantine-after, ...),
// overlaid with a tenant's own values (ForTenant). It is the pool's
// (pool.Policy), with the server's ranges (Validate) and its conversions
// to and from the stored form. The zero value of a field means the pool's
// default.
type Policy pool.Policy

// PolicyDefaults fills p's zero fields with the pool's defaults.
func PolicyDefaults(p Policy) Policy {
	return defaults.Fill(p, Policy(pool.Config{}.WithDefaults().Policy()))
}

// Validate names the first field out of its range, by its configuration
// key, after defaults.
func (p Policy) Validate() error {
	p = PolicyDefaults(p)
	switch {
	case p.HalfLife < pool.MinHalfLife || p.HalfLife > pool.MaxHalfLife:
		return fmt.Errorf("config: half_life %v: want %s to %s (30 days)", p.HalfLife, short(pool.MinHalfLife), short(pool.MaxHalfLife))
	case p.FailuresToQuarantine < 1 || p.FailuresToQuarantine > pool.MaxFailuresToQuarantine:
		return fmt.Errorf("config: quarantine_after %d: want 1 to %d consecutive failures", p.FailuresToQuarantine, pool.MaxFailuresToQuarantine)
	case p.FailuresToQuarantineWhole < 1 || p.FailuresToQuarantineWhole > pool.MaxFailuresToQuarantineWhole:
		return fmt.Errorf("config: quarantine_whole_after %d: want 1 to %d consecutive failures", p.FailuresToQuarantineWhole, pool.MaxFailuresToQuarantineWhole)
	case math.IsNaN(p.QuarantineBelow) || p.QuarantineBelow >= 1 || p.QuarantineBelow < -1:
		return fmt.Errorf("config: quarantine_below %v: want a success rate below 1 (0.1 is 10%%), or -1 to turn the rule off", p.QuarantineBelow)
	case math.IsNaN(p.QuarantineMinEvidence) || p.QuarantineMinEvidence < 1 || p.QuarantineMinEvidence > pool.MaxQuarantineMinEvidence:
		return fmt.Errorf("config: quarantine_min_evidence %v: want 1 to %.0f observations", p.QuarantineMinEvidence, pool.MaxQuarantineMinEvidence)
	case p.CooldownBase < pool.MinCooldown || p.CooldownBase > pool.MaxCooldownBase:
		return fmt.Errorf("config: cooldown_base %v: want %s to %s", p.CooldownBase, short(pool.MinCooldown), short(pool.MaxCooldownBase))
	case p.CooldownMax < p.CooldownBase || p.CooldownMax > pool.MaxCooldownMax:
		return fmt.Errorf("config: cooldown_max %v: want cooldown_base (%v) to %s (30 days)", p.CooldownMax, p.CooldownBase, short(pool.MaxCooldownMax))
	case p.Objective != pool.ObjectiveSuccess && p.Objective != pool.ObjectiveSuccessPerTime:
		return fmt.Errorf("config: objective %q: want %s or %s", p.Objective, pool.ObjectiveSuccess, pool.ObjectiveSuccessPerTime)
	case p.MaxUses < 0 || p.MaxUses > pool.MaxMaxUses:
		return fmt.Errorf("config: max_uses %d: want 0 (no limit) to %d leases", p.MaxUses, pool.MaxMaxUses)
	case p.MaxAge < 0 || p.MaxAge > pool.MaxMaxAge || p.MaxAge%time.Second != 0:
		return fmt.Errorf("config: max_age %v: want 0 (no limit) to %s (365 days), in whole seconds", p.MaxAge, short(pool.MaxMaxAge))
	case !(p.MaxQuarantinedShare > 0 && p.MaxQuarantinedShare <= 1):
		return fmt.Errorf("config: max_quarantined_share %v: want a share above 0, at most 1 (1: no cap)", p.MaxQuarantinedShare)
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
	whole(&p.FailuresToQuarantine, t.QuarantineAfter)
	whole(&p.FailuresToQuarantineWhole, t.QuarantineWholeAfter)
	if t.QuarantineBelow != nil {
		p.QuarantineBelow = *t.QuarantineBelow
	}
	if t.QuarantineMinEvidence != nil {
		p.QuarantineMinEvidence = *t.QuarantineMinEvidence
	}
	sec(&p.CooldownBase, t.CooldownBaseSeconds)
	sec(&p.CooldownMax, t.CooldownMaxSeconds)
	if t.Objective != nil {
		p.Objective = pool.Objective(*t.Objective)
	}
	whole(&p.MaxUses, t.MaxUses)
	sec(&p.MaxAge, t.MaxAgeSeconds)
	if t.MaxQuarantinedShare != nil {
		p.MaxQuarantinedShare = *t.MaxQuarantinedShare
	}
	return p
}

// Stored returns p as the control plane shows the server-wide default
// policy: durations in whole seconds, a negative quarantine_below as -1
// (off).
func (p Policy) Stored() store.Policy {
	p = PolicyDefaults(p)
	secs := func(d time.Duration) *int64 { v := int64(d / time.Second); return &v }
	whole := func(n int) *int64 { v := int64(n); return &v }
	below, evidence, objective, share := p.QuarantineBelow, p.QuarantineMinEvidence, string(p.Objective), p.MaxQuarantinedShare
	if below < 0 {
		below = -1
	}
	return store.Policy{
		HalfLifeSeconds: secs(p.HalfLife), QuarantineAfter: whole(p.FailuresToQuarantine), QuarantineWholeAfter: whole(p.FailuresToQuarantineWhole),
		QuarantineBelow: &below, QuarantineMinEvidence: &evidence,
		CooldownBaseSeconds: secs(p.CooldownBase), CooldownMaxSeconds: secs(p.CooldownMax), Objective: &objective,
		MaxUses: whole(p.MaxUses), MaxAgeSeconds: secs(p.MaxAge), MaxQuarantinedShare: &share,
	}
}

// PoolPolicy is p as a running pool takes it (pool.SetPolicy), defaults
// applied.
func (p Policy) PoolPolicy() pool.Policy { return pool.Policy(PolicyDefaults(p)) }

// PoolConfig is c with p's fields, defaults applied.
func (p Policy) PoolConfig(c pool.Config) pool.Config { return c.WithPolicy(p.PoolPolicy()) }

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
