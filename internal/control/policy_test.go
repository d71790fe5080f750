package control

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/tenants"
)

func TestPutPolicy(t *testing.T) {
	h := newHarness(t, openSQLite)
	h.createTenant("a")
	op, admin := h.token(RoleOperator, ""), h.token(RoleTenantAdmin, "a")
	h.mustDo("PUT", "/api/v1/tenants/a/limits", op, `{"burst":7}`, 200, nil)
	h.hooks.Calls()
	tests := []struct {
		name, tok, body string
		want            string // what is stored after the call, limits and policy
		effective       string // the policy in force, as JSON
		audit           string
	}{
		{"operator sets two", op, `{"quarantine_after":3,"cooldown_base_seconds":10}`,
			`{"burst":7,"policy.cooldown_base_seconds":10,"policy.quarantine_after":3}`,
			`{"half_life_seconds":3600,"quarantine_after":3,"quarantine_whole_after":20,"quarantine_below":0.1,"quarantine_min_evidence":10,"cooldown_base_seconds":10,"cooldown_max_seconds":3600,"objective":"success","max_uses":0,"max_age_seconds":0,"max_quarantined_share":0.5}`,
			"quarantine_after default -> 3, cooldown_base_seconds default -> 10"},
		{"tenant-admin sets its own, keeps the rest", admin, `{"half_life_seconds":600,"quarantine_below":-1,"quarantine_min_evidence":2.5}`,
			`{"burst":7,"policy.cooldown_base_seconds":10,"policy.half_life_seconds":600,"policy.quarantine_after":3,"policy.quarantine_below":-1,"policy.quarantine_min_evidence":2.5}`,
			`{"half_life_seconds":600,"quarantine_after":3,"quarantine_whole_after":20,"quarantine_below":-1,"quarantine_min_evidence":2.5,"cooldown_base_seconds":10,"cooldown_max_seconds":3600,"objective":"success","max_uses":0,"max_age_seconds":0,"max_quarantined_share":0.5}`,
			"half_life_seconds default -> 600, quarantine_below default -> -1, quarantine_min_evidence default -> 2.5"},
		{"null resets to the server default", admin, `{"quarantine_after":null,"cooldown_max_seconds":60,"quarantine_whole_after":4}`,
			`{"burst":7,"policy.cooldown_base_seconds":10,"policy.cooldown_max_seconds":60,"policy.half_life_seconds":600,"policy.quarantine_below":-1,"policy.quarantine_min_evidence":2.5,"policy.quarantine_whole_after":4}`,
			`{"half_life_seconds":600,"quarantine_after":5,"quarantine_whole_after":20,"quarantine_below":-1,"quarantine_min_evidence":2.5,"cooldown_base_seconds":10,"cooldown_max_seconds":60,"objective":"success","max_uses":0,"max_age_seconds":0,"max_quarantined_share":0.5}`,
			"quarantine_after 3 -> default, quarantine_whole_after default -> 4, cooldown_max_seconds default -> 60"},
		{"tenant-admin chooses the time objective", admin, `{"objective":"success_per_time"}`,
			`{"burst":7,"policy.cooldown_base_seconds":10,"policy.cooldown_max_seconds":60,"policy.half_life_seconds":600,"policy.objective":"success_per_time","policy.quarantine_below":-1,"policy.quarantine_min_evidence":2.5,"policy.quarantine_whole_after":4}`,
			`{"half_life_seconds":600,"quarantine_after":5,"quarantine_whole_after":4,"quarantine_below":-1,"quarantine_min_evidence":2.5,"cooldown_base_seconds":10,"cooldown_max_seconds":60,"objective":"success_per_time","max_uses":0,"max_age_seconds":0,"max_quarantined_share":0.5}`,
			"objective default -> success_per_time"},
		{"null resets the objective", admin, `{"objective":null}`,
			`{"burst":7,"policy.cooldown_base_seconds":10,"policy.cooldown_max_seconds":60,"policy.half_life_seconds":600,"policy.quarantine_below":-1,"policy.quarantine_min_evidence":2.5,"policy.quarantine_whole_after":4}`,
			`{"half_life_seconds":600,"quarantine_after":5,"quarantine_whole_after":4,"quarantine_below":-1,"quarantine_min_evidence":2.5,"cooldown_base_seconds":10,"cooldown_max_seconds":60,"objective":"success","max_uses":0,"max_age_seconds":0,"max_quarantined_share":0.5}`,
			"objective success_per_time -> default"},
	}
	// The third case's effective quarantine_whole_after is 4.
	tests[2].effective = strings.Replace(tests[2].effective, `"quarantine_whole_after":20`, `"quarantine_whole_after":4`, 1)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.t = t
			var got policyJSON
			h.mustDo("PUT", "/api/v1/tenants/a/policy", tt.tok, tt.body, 200, &got)
			stored, err := h.real.GetLimits(context.Background(), "a")
			if err != nil {
				t.Fatalf("GetLimits() = got error %v, want nil", err)
			}
			if s := showLimits(stored); s != tt.want {
				t.Errorf("stored = got %s, want %s", s, tt.want)
			}
			if !reflect.DeepEqual(got, testRules.policyToJSON(stored.Policy)) {
				t.Errorf("PUT response = got %+v, want the stored policy %s", got, showLimits(stored))
			}
			if eff, _ := json.Marshal(got.Effective); string(eff) != tt.effective {
				t.Errorf("PUT response: effective = got %s, want %s", eff, tt.effective)
			}
			if calls, want := h.hooks.Calls(), []string{"ApplyLimits(a, " + tt.want + ")"}; !reflect.DeepEqual(calls, want) {
				t.Errorf("hooks = got %q, want %q", calls, want)
			}
			var read policyJSON
			h.mustDo("GET", "/api/v1/tenants/a/policy", h.token(RoleTenantViewer, "a"), "", 200, &read)
			if !reflect.DeepEqual(read, got) {
				t.Errorf("GET .../policy = got %+v, want %+v", read, got)
			}
			es, err := h.real.ListAudit(context.Background(), "a", 1, 0)
			if err != nil || len(es) != 1 || es[0].Action != "policy.put" || es[0].Detail != tt.audit {
				t.Errorf("newest audit entry = got %+v, %v, want policy.put %q", es, err, tt.audit)
			}
		})
	}
	// Limits set later keep the policy, and the other way round.
	h.t = t
	h.mustDo("PUT", "/api/v1/tenants/a/limits", op, `{"burst":8}`, 200, nil)
	if l, _ := h.real.GetLimits(context.Background(), "a"); l.Policy.HalfLifeSeconds == nil || *l.Policy.HalfLifeSeconds != 600 {
		t.Errorf("policy after PUT .../limits = got %s, want half_life_seconds 600 kept", showLimits(l))
	}
	// An unknown objective is refused in our words, and changes nothing.
	before := h.snapshot()
	bad := h.do("PUT", "/api/v1/tenants/a/policy", admin, `{"objective":"fastest"}`)
	if bad.status != 400 || !strings.Contains(bad.errorMessage(), `objective "fastest" is not one of success, success_per_time`) {
		t.Errorf("PUT .../policy objective fastest = got %d %s, want 400 naming the objectives", bad.status, bad.body)
	}
	h.unchanged("PUT .../policy with an unknown objective", before)
	r := h.mustDo("GET", "/api/v1/tenants/a/policy", admin, "", 200, nil)
	if !strings.Contains(r.body, `"objective":`) {
		t.Errorf("GET .../policy = got %s, without field objective", r.body)
	}
	for _, f := range policyFields {
		if !strings.Contains(r.body, `"`+f.name+`":`) {
			t.Errorf("GET .../policy = got %s, without field %s", r.body, f.name)
		}
	}
}

func TestPutPolicyRefusedByTheServer(t *testing.T) {
	h := newHarness(t, openSQLite)
	h.createTenant("a")
	op := h.token(RoleOperator, "")
	h.hooks.applyLimits = func(string, store.Limits) error {
		return fmt.Errorf("%w: half_life 1m0s: not today", tenants.ErrInvalidLimits)
	}
	before := h.snapshot()
	r := h.do("PUT", "/api/v1/tenants/a/policy", op, `{"half_life_seconds":60}`)
	if r.status != 400 || r.errorCode() != codeInvalidArgument || r.errorMessage() != "half_life 1m0s: not today" {
		t.Fatalf("PUT .../policy refused by the hook = got %d %s, want 400 with the hook's words", r.status, r.body)
	}
	h.unchanged("PUT .../policy refused by the hook", before)
}

func TestPutPolicyStoreFailureRollsBack(t *testing.T) {
	h := newHarness(t, openSQLite)
	h.createTenant("a")
	op := h.token(RoleOperator, "")
	h.mustDo("PUT", "/api/v1/tenants/a/policy", op, `{"quarantine_after":4}`, 200, nil)
	h.hooks.Calls()
	h.st.fail = func(method string) error {
		if method == "PutLimits" {
			return fmt.Errorf("%w: connection reset by 10.9.9.9", store.ErrUnavailable)
		}
		return nil
	}
	before := h.snapshot()
	r := h.do("PUT", "/api/v1/tenants/a/policy", op, `{"quarantine_after":2}`)
	if r.status != 503 || r.errorCode() != codeUnavailable || strings.Contains(r.body, "10.9.9.9") {
		t.Fatalf("PUT .../policy with PutLimits down = got %d %s, want 503 unavailable without the store's text", r.status, r.body)
	}
	want := []string{`ApplyLimits(a, {"policy.quarantine_after":2})`, `ApplyLimits(a, {"policy.quarantine_after":4})`}
	if got := h.hooks.Calls(); !reflect.DeepEqual(got, want) {
		t.Fatalf("hooks = got %q, want %q (apply, then roll back)", got, want)
	}
	h.unchanged("PUT .../policy with PutLimits down", before)
}

func TestLimitRulesCheckPolicy(t *testing.T) {
	bad := store.Limits{Policy: store.Policy{QuarantineAfter: ptr(int64(0))}}
	if err := testRules.Check(bad); err == nil || !strings.Contains(err.Error(), "policy: quarantine_after 0 is out of range") {
		t.Errorf("Check(quarantine_after 0) = got %v, want an error naming policy: quarantine_after", err)
	}
	rules := testRules
	rules.Defaults.Policy.CooldownMaxSeconds = nil
	if err := rules.validate(); err == nil || !strings.Contains(err.Error(), "cooldown_max_seconds is not set") {
		t.Errorf("validate() without a default cooldown_max_seconds = got %v, want an error naming it", err)
	}
}
