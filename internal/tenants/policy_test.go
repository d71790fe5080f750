package tenants

import (
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/internal/store"
)

func TestPolicyRanges(t *testing.T) {
	for _, tt := range []struct {
		p    Policy
		want string
	}{
		{Policy{}, ""},
		{Policy{FailuresToQuarantine: 3, CooldownBase: time.Minute, CooldownMax: time.Hour, QuarantineBelow: -1}, ""},
		{Policy{HalfLife: time.Second}, "half_life 1s: want 1m to 720h"},
		{Policy{FailuresToQuarantine: -1}, "quarantine_after -1: want 1 to 1000"},
		{Policy{FailuresToQuarantineWhole: 1 << 20}, "quarantine_whole_after"},
		{Policy{QuarantineBelow: 1}, "quarantine_below 1: want a success rate below 1"},
		{Policy{QuarantineMinEvidence: 0.5}, "quarantine_min_evidence 0.5"},
		{Policy{CooldownBase: time.Millisecond}, "cooldown_base 1ms: want 1s to 24h"},
		{Policy{CooldownBase: time.Minute, CooldownMax: time.Second}, "cooldown_max 1s: want cooldown_base (1m0s)"},
	} {
		err := tt.p.Validate()
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("validate(%+v) = %v, want %q", tt.p, err, tt.want)
		}
	}
}

// TestPolicyAsTheControlPlaneShowsIt: the server-wide policy, as the
// control plane shows it (whole seconds, -1 for off), is within the
// control plane's ranges for any flags the server accepts, so that such
// flags start a server; a tenant's values replace it field by field and
// the flags' own durations stay exact elsewhere. (That such flags start
// a server is tested in internal/server.)
func TestPolicyAsTheControlPlaneShowsIt(t *testing.T) {
	p := Policy{QuarantineBelow: -0.5, CooldownBase: 1500 * time.Millisecond, CooldownMax: 1600 * time.Millisecond, HalfLife: 90 * time.Second}
	st := p.Stored()
	if *st.QuarantineBelow != -1 || *st.CooldownBaseSeconds != 1 || *st.CooldownMaxSeconds != 1 || *st.HalfLifeSeconds != 90 || *st.QuarantineAfter != 5 {
		t.Errorf("Stored() = below %v, base %d, max %d, half-life %d, after %d; want -1, 1, 1, 90, 5",
			*st.QuarantineBelow, *st.CooldownBaseSeconds, *st.CooldownMaxSeconds, *st.HalfLifeSeconds, *st.QuarantineAfter)
	}
	three, ten := int64(3), int64(10)
	got := p.ForTenant(store.Policy{QuarantineAfter: &three, CooldownMaxSeconds: &ten})
	want := PolicyDefaults(p)
	want.FailuresToQuarantine, want.CooldownMax = 3, 10*time.Second
	if got != want {
		t.Errorf("ForTenant() = %+v, want %+v", got, want)
	}
}
