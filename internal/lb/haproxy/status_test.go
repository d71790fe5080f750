package haproxy

import "testing"

func TestParseStatus(t *testing.T) {
	tests := []struct {
		raw  string
		want Status
	}{
		{"UP", StatusUp},
		{"UP 1/2", StatusUp},
		{"no check", StatusUp},
		{"NOLB", StatusNOLB},
		{"NOLB 1/2", StatusNOLB},
		{"DOWN", StatusDown},
		{"DOWN 1/2", StatusDown},
		{"MAINT", StatusMaint},
		{"MAINT (via repool/x)", StatusMaint},
		{"DRAIN", StatusDrain},
		{"DRAIN (agent)", StatusDrain},
		{"weird", Status("weird")},
	}
	for _, tt := range tests {
		if got := parseStatus(tt.raw); got != tt.want {
			t.Errorf("parseStatus(%q) = got %s, want %s", tt.raw, got, tt.want)
		}
	}
}
