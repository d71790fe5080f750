package jobs

import (
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
)

// ParseFlags reads the jobs mode's command line into fs and returns the
// validated Config and the number of seeds to run (1, 2, ...).
func ParseFlags(fs *flag.FlagSet, args []string) (Config, int, error) {
	var c Config
	var seeds int
	fs.IntVar(&seeds, "seeds", 5, "seeds to run, 1 to N; each row is the mean over them")
	fs.IntVar(&c.Jobs, "jobs", 3000, "jobs per run")
	fs.IntVar(&c.Workers, "workers", 8, "jobs run at once")
	if err := fs.Parse(args); err != nil {
		return Config{}, 0, err
	}
	if fs.NArg() > 0 {
		return Config{}, 0, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if seeds < 1 {
		return Config{}, 0, fmt.Errorf("-seeds %d is below 1", seeds)
	}
	return c, seeds, c.Validate()
}

// Mean is the mean of each strategy's figures over several runs.
type Mean struct {
	Name                                                 string
	Success, After, SameAfterFailure, SlowShare          float64
	TurnedBadJobs, MaxTurnedBadJobs, JobsPS, SuccessesPS float64
	BeforeLeft, MaxBeforeLeft                            float64
}

// Means runs cfg with seeds 1 to n and returns each strategy's means.
func Means(cfg Config, n int) ([]Mean, error) {
	var out []Mean
	for seed := 1; seed <= n; seed++ {
		c := cfg
		c.Seed = uint64(seed)
		rep, err := Simulate(c)
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = make([]Mean, len(rep.Results))
		}
		for i, r := range rep.Results {
			m := &out[i]
			m.Name = r.Name
			f := 1 / float64(n)
			m.Success += f * r.SuccessRate()
			m.After += f * r.AfterRate()
			m.SameAfterFailure += f * r.SameAfterFailureRate()
			m.SlowShare += f * r.SlowShare()
			m.TurnedBadJobs += f * float64(r.TurnedBadJobs)
			m.MaxTurnedBadJobs = max(m.MaxTurnedBadJobs, float64(r.TurnedBadJobs))
			m.BeforeLeft += f * float64(r.TurnedBadBeforeLeft)
			m.MaxBeforeLeft = max(m.MaxBeforeLeft, float64(r.TurnedBadBeforeLeft))
			m.JobsPS += f * r.JobsPerSecond()
			m.SuccessesPS += f * r.SuccessesPerSecond()
		}
	}
	return out, nil
}

// Run writes the world and the table of means over seeds 1 to n to w.
func Run(cfg Config, n int, w io.Writer) error {
	ms, err := Means(cfg, n)
	if err != nil {
		return err
	}
	c := cfg.withDefaults()
	fmt.Fprintf(w, "repool realistic-job simulation: %d jobs on %d workers, seeds 1-%d, simulated time (fake clock)\n", c.Jobs, c.Workers, n)
	fmt.Fprintln(w, "resources (p = success probability, latency = mean; a job takes 0.5-1.5× it):")
	for _, r := range c.Resources {
		turn := ""
		if r.TurnsTo > 0 {
			turn = fmt.Sprintf(", p %.2f from job %d on", r.TurnsTo, c.SwitchAt)
		}
		fmt.Fprintf(w, "  %-14s p %.2f  latency %-6v capacity %d%s\n", r.Name, r.P, r.Latency, r.Capacity, turn)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tsuccess%\tafter switch%\tsame after failure%\tbefore left (max)\tturned-bad jobs (max)\tslow share%\tjobs/s\tsuccesses/s\t")
	for _, m := range ms {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.1f (%.0f)\t%.1f (%.0f)\t%.1f\t%.1f\t%.1f\t\n",
			m.Name, m.Success, m.After, m.SameAfterFailure, m.BeforeLeft, m.MaxBeforeLeft, m.TurnedBadJobs, m.MaxTurnedBadJobs, m.SlowShare, m.JobsPS, m.SuccessesPS)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "  after switch% = success% of the jobs from the switch on; same after failure% = failed jobs whose worker's next job ran")
	fmt.Fprintf(w, "  on the same resource; before left = jobs given to turns-bad after it turned, before the first %d jobs in a row without it;\n", LeftAfter)
	fmt.Fprintln(w, "  turned-bad jobs = all jobs given to it after it turned, probes included (mean, max over seeds);")
	fmt.Fprintln(w, "  slow share% = jobs on the 2s resources; jobs/s and successes/s in simulated time")
	return nil
}
