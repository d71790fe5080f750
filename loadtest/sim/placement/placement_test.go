package placement

import (
	"strings"
	"testing"
)

// The figures docs/scaling.md states: 8 groups, the Mix of sizes, a goal
// of the largest group within 10% of the mean; seed 1, and the spread
// over seeds 1–20.
func TestDocumentedFigures(t *testing.T) {
	for _, tc := range []struct {
		tenants      int
		seed1, sweep string
	}{
		{200,
			"seed 1: 200 tenants (694518 resources, largest 85435) on 8 groups: mean 86815 per group; placed: largest group 2.18× the mean, smallest 0.24×; 13 moves (163446 resources, 23.5% of the total) bring the largest within 10% (1.09×)",
			"largest group 1.57–3.24× the mean, smallest 0.13–0.57×; 5–41 moves; goal not reached: 10 (one tenant alone), 0 (other)"},
		{1000,
			"seed 1: 1000 tenants (3085616 resources, largest 87358) on 8 groups: mean 385702 per group; placed: largest group 1.49× the mean, smallest 0.53×; 3 moves (215280 resources, 7.0% of the total) bring the largest within 10% (1.08×)",
			"largest group 1.10–1.91× the mean, smallest 0.46–0.86×; 0–6 moves; goal not reached: 0 (one tenant alone), 0 (other)"},
		{5000,
			"seed 1: 5000 tenants (16361722 resources, largest 99210) on 8 groups: mean 2045215 per group; placed: largest group 1.21× the mean, smallest 0.84×; 3 moves (273907 resources, 1.7% of the total) bring the largest within 10% (1.08×)",
			"largest group 1.11–1.49× the mean, smallest 0.69–0.94×; 1–9 moves; goal not reached: 0 (one tenant alone), 0 (other)"},
	} {
		c := Config{Seed: 1, Tenants: tc.tenants, Groups: 8, Within: 0.10}
		r, err := Run(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Log(r)
		if got := r.String(); got != tc.seed1 {
			t.Errorf("Run(%+v) =\n%s\nwant (docs/scaling.md)\n%s", c, got, tc.seed1)
		}
		rg, err := Sweep(c, 20)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("seeds 1-20: %v", rg)
		if got := rg.String(); got != tc.sweep {
			t.Errorf("Sweep(%+v, 20) =\n%s\nwant (docs/scaling.md)\n%s", c, got, tc.sweep)
		}
	}
}

// TestPlaceIsTheStoresRule: fewest tenants, the first group by name on a
// tie — so tenant i lands on group i mod G, whatever its size.
func TestPlaceIsTheStoresRule(t *testing.T) {
	tenants := Sizes(7, 103)
	placed := Place(tenants, 4)
	for g, ts := range placed {
		for k, tn := range ts {
			if want := k*4 + g; tn.ID != want {
				t.Fatalf("group %d tenant %d = tenant %d, want %d", g, k, tn.ID, want)
			}
		}
	}
	if len(placed[0]) != 26 || len(placed[3]) != 25 {
		t.Fatalf("tenants per group = %d..%d, want 26 on the first, 25 on the last", len(placed[0]), len(placed[3]))
	}
}

// TestRebalanceKeepsEveryTenant: moves neither lose nor duplicate a
// tenant, never raise the largest group, and meet the goal when they say
// so.
func TestRebalanceKeepsEveryTenant(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		tenants := Sizes(seed, 300)
		placed := Place(tenants, 6)
		before := loads(placed)
		_, _, reached := Rebalance(placed, 0.05)
		after := loads(placed)
		seen := map[int]bool{}
		for _, ts := range placed {
			for _, tn := range ts {
				if seen[tn.ID] {
					t.Fatalf("seed %d: tenant %d placed twice", seed, tn.ID)
				}
				seen[tn.ID] = true
			}
		}
		if len(seen) != len(tenants) {
			t.Fatalf("seed %d: %d tenants placed, want %d", seed, len(seen), len(tenants))
		}
		total, hiBefore, hiAfter := 0, 0, 0
		for g := range after {
			total += after[g]
			hiBefore, hiAfter = max(hiBefore, before[g]), max(hiAfter, after[g])
		}
		if hiAfter > hiBefore {
			t.Fatalf("seed %d: largest group %d after, %d before", seed, hiAfter, hiBefore)
		}
		if reached && float64(hiAfter) > 1.05*float64(total)/6 {
			t.Fatalf("seed %d: reached, but the largest group is %d of a mean %d", seed, hiAfter, total/6)
		}
	}
}

func TestSizesFollowTheMix(t *testing.T) {
	counts := map[string]int{}
	for _, tn := range Sizes(1, 100_000) {
		for _, c := range Mix {
			if tn.Resources >= c.Min && tn.Resources < c.Max {
				counts[c.Name]++
			}
		}
	}
	for _, c := range Mix {
		if got := float64(counts[c.Name]) / 100_000; got < c.Share-0.01 || got > c.Share+0.01 {
			t.Errorf("share of %s tenants = %.3f, want %.2f", c.Name, got, c.Share)
		}
	}
}

func TestValidateNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{Tenants: 0, Groups: 8, Within: 0.1}, "Tenants"},
		{Config{Tenants: 10, Groups: 0, Within: 0.1}, "Groups"},
		{Config{Tenants: 10, Groups: 8, Within: 0}, "Within"},
		{Config{Tenants: 10, Groups: 8, Within: 1.5}, "Within"},
	} {
		_, err := Run(tc.c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%+v) = %v, want an error naming %s", tc.c, err, tc.want)
		}
	}
}
