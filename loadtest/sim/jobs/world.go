// Package jobs simulates a realistic job: a few workers that run jobs
// through a dozen resources (proxies) of known quality and speed, one of
// which turns bad halfway, in simulated time. It compares the reputation
// pool (internal/pool) under both objectives with round robin, uniform
// random and an oracle that knows the success rates, on the same jobs:
// job i succeeds on resource r iff U_i < p(r) and takes r's mean latency
// times F_i, with one U_i and one F_i shared by every strategy (common
// random numbers).
//
// Run is the "jobs" mode of loadtest/sim; Simulate is what the tests call.
package jobs

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Resource is one simulated resource: its success probability and mean
// latency, and, for the one that turns bad, its probability after the
// switch.
type Resource struct {
	Name     string
	P        float64
	Latency  time.Duration
	Capacity int
	// TurnsTo is the success probability from the switch on; 0 means the
	// resource does not change.
	TurnsTo float64
}

// DefaultResources is the world of the realistic job: good, mediocre and
// bad resources, one of each 10× slower than its fast peers, and a good
// one that turns bad halfway.
func DefaultResources() []Resource {
	const fast, slow = 200 * time.Millisecond, 2 * time.Second
	rs := []Resource{
		{Name: "good-1", P: 0.97, Latency: fast},
		{Name: "good-2", P: 0.97, Latency: fast},
		{Name: "good-3", P: 0.97, Latency: fast},
		{Name: "good-slow", P: 0.97, Latency: slow},
		{Name: "turns-bad", P: 0.97, Latency: fast, TurnsTo: 0.05},
		{Name: "mediocre-1", P: 0.85, Latency: 250 * time.Millisecond},
		{Name: "mediocre-2", P: 0.85, Latency: 250 * time.Millisecond},
		{Name: "mediocre-3", P: 0.85, Latency: 250 * time.Millisecond},
		{Name: "mediocre-slow", P: 0.85, Latency: slow},
		{Name: "bad-1", P: 0.25, Latency: 300 * time.Millisecond},
		{Name: "bad-2", P: 0.25, Latency: 300 * time.Millisecond},
		{Name: "bad-slow", P: 0.25, Latency: slow},
	}
	for i := range rs {
		rs[i].Capacity = 4
	}
	return rs
}

// Config describes one run. The zero value of every field means its
// default (withDefaults).
type Config struct {
	// Seed selects the jobs' random numbers and every strategy's own.
	Seed uint64
	// Resources is the world. Default DefaultResources.
	Resources []Resource
	// Jobs is the number of jobs. Default 3000.
	Jobs int
	// Workers is the number of jobs run at once. Default 8.
	Workers int
	// SwitchAt is the job from which the resources with TurnsTo have
	// turned. Default Jobs/2.
	SwitchAt int
}

func (c Config) withDefaults() Config {
	if c.Resources == nil {
		c.Resources = DefaultResources()
	}
	if c.Jobs == 0 {
		c.Jobs = 3000
	}
	if c.Workers == 0 {
		c.Workers = 8
	}
	if c.SwitchAt == 0 {
		c.SwitchAt = c.Jobs / 2
	}
	return c
}

// Validate reports the first field out of range, after defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	slots := 0
	for i, r := range c.Resources {
		switch {
		case r.P <= 0 || r.P > 1 || r.TurnsTo < 0 || r.TurnsTo > 1:
			return fmt.Errorf("resources[%d] %s: P %v / TurnsTo %v outside (0, 1]", i, r.Name, r.P, r.TurnsTo)
		case r.Latency <= 0 || r.Capacity < 1:
			return fmt.Errorf("resources[%d] %s: latency %v and capacity %d must be positive", i, r.Name, r.Latency, r.Capacity)
		}
		slots += r.Capacity
	}
	switch {
	case len(c.Resources) == 0:
		return fmt.Errorf("no resources")
	case c.Jobs < 1:
		return fmt.Errorf("Jobs %d is below 1", c.Jobs)
	case c.Workers < 1 || c.Workers > slots:
		return fmt.Errorf("Workers %d is outside [1, %d], the resources' capacity", c.Workers, slots)
	case c.SwitchAt < 0 || c.SwitchAt > c.Jobs:
		return fmt.Errorf("SwitchAt %d is outside [0, Jobs=%d]", c.SwitchAt, c.Jobs)
	}
	return nil
}

// job is one job's random numbers: it succeeds on r iff u < p(r), and
// takes r's mean latency times f.
type job struct{ u, f float64 }

// draws returns the jobs of a run, the same for every strategy.
func draws(c Config) []job {
	rng := rand.New(rand.NewPCG(c.Seed, 0x6a6f6273)) // "jobs"
	js := make([]job, c.Jobs)
	for i := range js {
		js[i] = job{u: rng.Float64(), f: 0.5 + rng.Float64()}
	}
	return js
}

// p is resource r's success probability for job i.
func (c Config) p(r, i int) float64 {
	res := c.Resources[r]
	if res.TurnsTo > 0 && i >= c.SwitchAt {
		return res.TurnsTo
	}
	return res.P
}

// slow reports whether r's mean latency is at least 5× the fastest one's.
func (c Config) slow(r int) bool {
	fastest := c.Resources[0].Latency
	for _, res := range c.Resources {
		fastest = min(fastest, res.Latency)
	}
	return c.Resources[r].Latency >= 5*fastest
}
