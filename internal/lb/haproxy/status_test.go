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

// TestStatusOf: a server UP at weight 0 (its agent said "up 0%") takes no
// traffic and is reported as DRAIN.
func TestStatusOf(t *testing.T) {
	tests := []struct {
		raw    string
		weight int64
		want   Status
	}{
		{"UP", 1, StatusUp},
		{"UP", 0, StatusDrain},
		{"UP 1/2", 0, StatusDrain},
		{"NOLB", 0, StatusNOLB},
		{"DOWN", 0, StatusDown},
		{"MAINT", 0, StatusMaint},
		{"no check", 0, StatusUp},
	}
	for _, tt := range tests {
		if got := statusOf(tt.raw, tt.weight); got != tt.want {
			t.Errorf("statusOf(%q, %d) = got %s, want %s", tt.raw, tt.weight, got, tt.want)
		}
	}
}
