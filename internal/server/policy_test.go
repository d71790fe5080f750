package server

import (
	"strings"
	"testing"
	"time"

	repoolv1 "github.com/repool/repool/api/repool/v1"
)

func TestPolicyRanges(t *testing.T) {
	for _, tt := range []struct {
		p    Policy
		want string
	}{
		{Policy{}, ""},
		{Policy{QuarantineAfter: 3, CooldownBase: time.Minute, CooldownMax: time.Hour, QuarantineBelow: -1}, ""},
		{Policy{HalfLife: time.Second}, "half_life 1s: want 1m to 720h"},
		{Policy{QuarantineAfter: -1}, "quarantine_after -1: want 1 to 1000"},
		{Policy{QuarantineWholeAfter: 1 << 20}, "quarantine_whole_after"},
		{Policy{QuarantineBelow: 1}, "quarantine_below 1: want a success rate below 1"},
		{Policy{QuarantineMinEvidence: 0.5}, "quarantine_min_evidence 0.5"},
		{Policy{CooldownBase: time.Millisecond}, "cooldown_base 1ms: want 1s to 24h"},
		{Policy{CooldownBase: time.Minute, CooldownMax: time.Second}, "cooldown_max 1s: want cooldown_base (1m0s)"},
	} {
		err := tt.p.validate()
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("validate(%+v) = %v, want %q", tt.p, err, tt.want)
		}
	}
}

// TestPolicyFlagsReachThePools: a resource that keeps failing is
// quarantined after --quarantine-after failures, for the cooldown
// --cooldown-base sets.
func TestPolicyFlagsReachThePools(t *testing.T) {
	r := start(t, Config{Store: sqliteStore(t), Policy: Policy{QuarantineAfter: 2, CooldownBase: 90 * time.Second, CooldownMax: time.Hour}})
	ctx := withKey(r.key)
	if _, err := r.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "p1"}}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := r.pool.Report(ctx, &repoolv1.ReportRequest{ResourceId: "p1", Context: "search", Outcome: repoolv1.Outcome_FAILURE}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := r.pool.GetResource(ctx, &repoolv1.GetResourceRequest{Id: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	c := got.GetResource().GetContexts()[0]
	left := time.Until(c.GetBlockedUntil().AsTime())
	if c.GetQuarantine() != "blocked" || left < 60*time.Second || left > 2*time.Minute {
		t.Fatalf("after 2 failures: %v (cooldown left %v), want blocked for about 90s (±20%% jitter)", c, left)
	}
}
