package quality

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/repool/repool/internal/pool"
)

// byName returns the result named name, or the zero Result.
func (r Report) byName(name string) Result {
	for _, res := range r.Results {
		if res.Name == name {
			return res
		}
	}
	return Result{}
}

// bestHeuristic returns the heuristic with the highest success rate.
func (r Report) bestHeuristic() Result {
	best := Result{}
	for _, res := range r.Results {
		if res.Heuristic && (best.Name == "" || res.SuccessRate() > best.SuccessRate()) {
			best = res
		}
	}
	return best
}

// SimLine is the summary line: ours, exact and the best heuristic's
// success rates.
func (r Report) SimLine() string {
	return fmt.Sprintf("sim: ours=%.2f exact=%.2f best_heuristic=%.2f",
		r.byName("ours").SuccessRate(), r.byName("exact").SuccessRate(), r.bestHeuristic().SuccessRate())
}

// writeHeader describes the world and the strategies.
func (r Report) writeHeader(w io.Writer) {
	c := r.Config
	wc := c.World
	simulated := time.Duration(c.Steps) * wc.Step
	nbad := int(math.Round(wc.BadFraction * float64(wc.Resources)))
	pc := c.poolConfig()
	overrides := ""
	if pc.Leaders > 0 {
		overrides += fmt.Sprintf(", Leaders %d", pc.Leaders)
	}
	if pc.Candidates > 0 {
		overrides += fmt.Sprintf(", Candidates %d", pc.Candidates)
	}
	lines := []string{
		fmt.Sprintf("repool selection-quality simulation, seed %d", wc.Seed),
		"world (hidden from every strategy but the oracle):",
		fmt.Sprintf("  resources   %d, capacity 1 each; %d contexts (target sites), requests spread evenly over them", wc.Resources, wc.Contexts),
		fmt.Sprintf("  time        %d requests, one every %v (%v simulated, fake clock); %d leases in flight: each outcome is reported and its lease released %d requests (%v) after the acquire",
			c.Steps, wc.Step, simulated, c.InFlight, c.InFlight, time.Duration(c.InFlight)*wc.Step),
		fmt.Sprintf("  spread      base p ~ Beta(%g, %g) per resource (good ones are rarer than mediocre ones), plus a per-context logit offset with sd %g",
			wc.BaseAlpha, wc.BaseBeta, wc.ContextSpread),
		fmt.Sprintf("  drift       each (resource, context) logit follows a mean-reverting random walk (Ornstein-Uhlenbeck): stationary sd %g, reversion time %v, stepped every %v",
			wc.DriftSD, wc.DriftTau, wc.Tick),
		fmt.Sprintf("  breakage    a healthy resource breaks on average once every %v; %.0f%% of breakages hit one context (a ban), the rest all contexts (down); p drops to %g",
			wc.BreakEvery, 100*wc.BreakOneContext, wc.BrokenP),
		fmt.Sprintf("  recovery    a breakage lasts Exp(mean %v), then the resource is back on its drifting p", wc.BreakFor),
		fmt.Sprintf("  always bad  %d resources (%.0f%%) at p = %g in every context, no drift", nbad, 100*wc.BadFraction, wc.BadP),
		fmt.Sprintf("  at start    mean p %.3f; mean p of the %d best per context %.3f; %.1f%% of healthy cells above 0.9; %d breakages over the run",
			r.Start.MeanP, c.InFlight, r.Start.TopMeanP, 100*r.Start.Above90, r.Start.Breakages),
		"  fairness    every strategy runs on its own copy of the same seeded world: same probabilities, drift and breakages, same",
		"              request stream; request t succeeds iff U_t < p(resource, context, t) with one U_t shared by all (common random numbers)",
		"strategies:",
		"  oracle      the free resource with the highest true p for the context (reference, not reachable)",
		"  ours        internal/pool: Acquire(context) then Release(outcome); pool defaults (leader board, candidates, quarantine,",
		fmt.Sprintf("              probes), HalfLife %v (pool default %v, which suits this drift)%s; fake clock, seeded PCG",
			c.HalfLife, pool.Config{}.WithDefaults().HalfLife, overrides),
		fmt.Sprintf("  exact       Thompson sampling over every free resource: exact Beta draws from the same per-context cells (HalfLife %v,", c.HalfLife),
		"              prior from the resource's aggregate), no candidate bound, no quarantine",
		"  heuristics, modelled on popular proxy pools (blocking is permanent, as there; context-blind):",
		"  uniform       uniformly random free resource",
		"  round-robin   the next free resource after the last one handed out",
		fmt.Sprintf("  fail-counter  removed for good after %d failures in total; uniform among the rest (all free ones when none is left)", c.FailLimit),
		fmt.Sprintf("  error-score   +1 per failure, -0.5 per success (floor 0), blocked for good at %g; uniform among unblocked (all free when none)", c.ScoreLimit),
	}
	fmt.Fprintln(w, strings.Join(lines, "\n"))
}

// writeTable writes one row per strategy.
func (r Report) writeTable(w io.Writer) error {
	oracle := r.byName("oracle")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tsuccess%\tE[p]%\tregret pts\tfirst-quarter%\tlast-quarter%\tacquired\texhausted\twall\t")
	for _, res := range r.Results {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%d\t%v\t\n",
			res.Name, res.SuccessRate(), res.ExpectedRate(), oracle.ExpectedRate()-res.ExpectedRate(),
			res.EarlyRate(), res.LateRate(), res.Acquired, res.Exhausted, res.Elapsed.Round(time.Millisecond))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "  success% = successes / requests (an exhausted request counts as a failure); E[p]% = mean true p of the leased resources;")
	fmt.Fprintln(w, "  regret pts = oracle E[p]% - E[p]%; first-/last-quarter% = success% over the first/last quarter of the requests")
	if c := r.byName("ours").Pool; c != nil {
		fmt.Fprintf(w, "ours pool counters: acquired=%d probes=%d quarantined=%d recovered=%d exhausted=%d expired=%d\n",
			c.Acquired, c.Probes, c.Quarantined, c.Recovered, c.Exhausted, c.Expired)
		fmt.Fprintf(w, "ours at the end: %d of %d cells past their quarantine cooldown but never probed back (skipped by Acquire)\n",
			c.Probation, c.Cells)
	}
	return nil
}
