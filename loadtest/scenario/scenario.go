// Package scenario reads the load-test scenario files of loadtest/scenarios:
// one JSON document per scenario, read both by the k6 script
// (loadtest/k6/repool.js) and by the Go runner (loadtest/cmd/run), so both
// drive the same arrival rate, request mix, thresholds and fault plan.
//
// A file looks like this (durations are k6/Go duration strings):
//
//	{
//	  "name": "provider-down",
//	  "description": "...",
//	  "rate": 50, "time_unit": "1s", "duration": "60s",
//	  "pre_allocated_vus": 5, "max_vus": 300, "graceful_stop": "5s",
//	  "providers": [{"name": "eu", "weight": 1}, {"name": "us", "weight": 1}],
//	  "request": {"context": "search", "ttl_seconds": 30, "resources": 64, "capacity": 4},
//	  "faults": [{"provider": "us", "kind": "down", "at": "10s", "for": "40s"}],
//	  "thresholds": {"dropped_iterations": ["count==0"], "http_req_duration{provider:eu}": ["p(95)<100"]},
//	  "sidecar": {"us": {"timeout": "1s"}},
//	  "naive": {"attempts_per_host": 3, "retry_delay": "200ms", "attempt_timeout": "1s"},
//	  "short": {"duration": "8s", "faults": [...]}
//	}
//
// Every iteration is one backend request: it picks a provider by the
// weighted round robin of Mix (iteration i uses Mix()[i%len]) and calls
// acquire, then report and release on that provider; a failed acquire ends
// the iteration. "short" replaces top-level fields for the CI variant.
//
// Values are plain data, safe to share once loaded.
package scenario

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"regexp"
	"strings"
	"time"
)

// Fault kinds.
const (
	// KindDown stops every server of the provider (SIGTERM, graceful) and
	// starts them again when the window ends.
	KindDown = "down"
	// KindKillActive kills the provider's active server (SIGKILL); the
	// standby takes over. With For set, the killed server is started again
	// (it rejoins as a standby) when the window ends.
	KindKillActive = "kill-active"
	// KindBlackhole makes every connection into the provider hang:
	// toxiproxy's timeout toxic (timeout 0) on both directions.
	KindBlackhole = "blackhole"
	// KindSlow delays every answer of the provider: toxiproxy's latency
	// toxic with Latency and Jitter.
	KindSlow = "slow"
	// KindBrownout answers Share of the provider's gRPC calls with
	// UNAVAILABLE, from a gRPC-level proxy in front of each server.
	KindBrownout = "brownout"
	// KindToxic adds any toxiproxy toxic (Toxic) to the provider's links.
	KindToxic = "toxic"
	// KindMove moves the provider's tenant to the group Group, live, through
	// the control plane of its group's active server (POST
	// /api/v1/tenants/{id}/move). Only in a scenario with Groups; For is
	// not allowed (a move is not undone).
	KindMove = "move"
)

// Scenario is one load-test scenario.
type Scenario struct {
	// Name is the scenario's name, the file's base name.
	Name string `json:"name"`
	// Description says what the scenario shows.
	Description string `json:"description"`
	// Rate iterations start every TimeUnit (k6 constant-arrival-rate).
	Rate int `json:"rate"`
	// TimeUnit is the period of Rate. Default 1s.
	TimeUnit Duration `json:"time_unit"`
	// Duration is how long iterations start. Required.
	Duration Duration `json:"duration"`
	// PreAllocatedVUs are started before the run. Required, at least 1.
	PreAllocatedVUs int `json:"pre_allocated_vus"`
	// MaxVUs bounds the VUs; an iteration that finds no free VU is
	// dropped and one more VU is started, up to MaxVUs. Default
	// PreAllocatedVUs.
	MaxVUs int `json:"max_vus"`
	// GracefulStop is how long running iterations may finish after
	// Duration before they are interrupted. Default 30s (k6's).
	GracefulStop Duration `json:"graceful_stop"`
	// Providers are the providers the iterations use. At least one.
	Providers []Provider `json:"providers"`
	// Request shapes each iteration's calls.
	Request Request `json:"request"`
	// Faults is the fault plan.
	Faults []Fault `json:"faults"`
	// Thresholds are k6 thresholds: metric (with an optional {tag:value}
	// filter) to expressions such as "p(95)<100" or "rate<0.01".
	Thresholds map[string][]string `json:"thresholds"`
	// Sidecar holds, per provider, settings merged into that provider's
	// entry of the generated sidecar configuration (timeout, retry,
	// breaker, ...; see internal/sidecar/config). Used by the Go runner.
	Sidecar map[string]map[string]any `json:"sidecar"`
	// Naive configures the naive client of -mode naive.
	Naive Naive `json:"naive"`
	// Groups, when set, runs the providers as tenants of one cluster of
	// tenant-sharded groups instead of one cluster each: one server per
	// group on one PostgreSQL database, one HAProxy routing each tenant to
	// its group's backend by the tenant map that "server haproxy
	// sync-placements" keeps, and every provider a tenant of its own (its
	// own API key) placed on the first group, which must be "default".
	// Needs PostgreSQL and the sidecar; faults other than move are not
	// supported there.
	Groups []string `json:"groups,omitempty"`
	// Short replaces top-level fields for the CI variant (-short). Only
	// kept raw here; Load applies it.
	Short json.RawMessage `json:"short,omitempty"`

	// IsShort is true once Load applied Short.
	IsShort bool `json:"-"`
	// Parsed thresholds, in metric order; set by Validate.
	parsed []Threshold
}

// Provider is one provider of the request mix.
type Provider struct {
	// Name is the provider's name in the sidecar's URLs.
	Name string `json:"name"`
	// Weight is the provider's share of iterations. Default 1.
	Weight int `json:"weight"`
}

// Request shapes an iteration's calls.
type Request struct {
	// Context is the acquire context. Default "search".
	Context string `json:"context"`
	// TTLSeconds is the lease lifetime. Default 30.
	TTLSeconds int `json:"ttl_seconds"`
	// Resources are registered per provider before the run, named
	// res-0000..; Capacity is each one's concurrent lease limit. Defaults
	// 64 and 4.
	Resources int `json:"resources"`
	Capacity  int `json:"capacity"`
	// FailureShare of iterations report FAILURE instead of SUCCESS.
	// Default 0.
	FailureShare float64 `json:"failure_share"`
	// Timeout bounds one HTTP call of the load generator. Default 60s
	// (k6's).
	Timeout Duration `json:"timeout"`
}

// Fault is one entry of the fault plan.
type Fault struct {
	// Provider is the provider the fault hits.
	Provider string `json:"provider"`
	// Kind is one of the Kind constants.
	Kind string `json:"kind"`
	// At is when the fault starts, from the start of the run.
	At Duration `json:"at"`
	// For is how long it lasts; zero means until the end of the run.
	For Duration `json:"for"`
	// Latency and Jitter are the slow fault's delay.
	Latency Duration `json:"latency"`
	Jitter  Duration `json:"jitter"`
	// Share is the brownout's share of calls answered UNAVAILABLE, in
	// (0, 1].
	Share float64 `json:"share"`
	// Toxic is the toxiproxy toxic of KindToxic: {"type", "stream",
	// "toxicity", "attributes"} as toxiproxy's API takes it.
	Toxic json.RawMessage `json:"toxic,omitempty"`
	// Group is the group a move takes the provider's tenant to.
	Group string `json:"group,omitempty"`
}

// End returns when the fault ends, given the run's duration.
func (f Fault) End(runDuration time.Duration) time.Duration {
	if f.For.D() == 0 || f.At.D()+f.For.D() > runDuration {
		return runDuration
	}
	return f.At.D() + f.For.D()
}

// Naive configures the naive client: it walks the provider's server list
// in order, follows "not the active server" to the next host at once, and
// retries every other transient failure AttemptsPerHost times per host with
// a fixed RetryDelay between attempts.
type Naive struct {
	// AttemptsPerHost default 3.
	AttemptsPerHost int `json:"attempts_per_host"`
	// RetryDelay between attempts. Default 200ms.
	RetryDelay Duration `json:"retry_delay"`
	// AttemptTimeout bounds one attempt. Default 1s.
	AttemptTimeout Duration `json:"attempt_timeout"`
}

// Duration is a time.Duration written as a string ("1m30s").
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: want a string such as \"10s\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %v", s, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// Load reads the scenario name (a file name.json of fsys), applies its
// short variant when short is set, applies defaults and validates it.
func Load(fsys fs.FS, name string, short bool) (*Scenario, error) {
	raw, err := fs.ReadFile(fsys, name+".json")
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", name, err)
	}
	s, err := Parse(raw, short)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", name, err)
	}
	return s, nil
}

// Parse reads a scenario document, as Load does.
func Parse(raw []byte, short bool) (*Scenario, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, err
	}
	if short {
		over, ok := top["short"]
		if !ok {
			return nil, errors.New("short: the scenario has no short variant")
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(over, &fields); err != nil {
			return nil, fmt.Errorf("short: %w", err)
		}
		for k, v := range fields {
			if k == "name" || k == "short" {
				return nil, fmt.Errorf("short: %q cannot be replaced", k)
			}
			top[k] = v
		}
	}
	merged, err := json.Marshal(top)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(merged))
	dec.DisallowUnknownFields()
	s := &Scenario{}
	if err := dec.Decode(s); err != nil {
		return nil, err
	}
	s.IsShort = short
	s.applyDefaults()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// applyDefaults puts defaults in place of zero values; the one place they
// are applied.
func (s *Scenario) applyDefaults() {
	if s.TimeUnit == 0 {
		s.TimeUnit = Duration(time.Second)
	}
	if s.MaxVUs == 0 {
		s.MaxVUs = s.PreAllocatedVUs
	}
	if s.GracefulStop == 0 {
		s.GracefulStop = Duration(30 * time.Second)
	}
	for i := range s.Providers {
		if s.Providers[i].Weight == 0 {
			s.Providers[i].Weight = 1
		}
	}
	r := &s.Request
	if r.Context == "" {
		r.Context = "search"
	}
	if r.TTLSeconds == 0 {
		r.TTLSeconds = 30
	}
	if r.Resources == 0 {
		r.Resources = 64
	}
	if r.Capacity == 0 {
		r.Capacity = 4
	}
	if r.Timeout == 0 {
		r.Timeout = Duration(60 * time.Second)
	}
	n := &s.Naive
	if n.AttemptsPerHost == 0 {
		n.AttemptsPerHost = 3
	}
	if n.RetryDelay == 0 {
		n.RetryDelay = Duration(200 * time.Millisecond)
	}
	if n.AttemptTimeout == 0 {
		n.AttemptTimeout = Duration(time.Second)
	}
}

var (
	providerName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	// groupName is a group's name as the server takes it (--group).
	groupName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,30}$`)
)

// Validate names the first bad field.
func (s *Scenario) Validate() error {
	switch {
	case s.Name == "":
		return errors.New("name: required")
	case s.Rate < 1:
		return fmt.Errorf("rate %d: want at least 1", s.Rate)
	case s.TimeUnit.D() <= 0:
		return fmt.Errorf("time_unit %v: want a positive duration", s.TimeUnit.D())
	case s.Duration.D() <= 0:
		return errors.New("duration: required, positive")
	case s.PreAllocatedVUs < 1:
		return fmt.Errorf("pre_allocated_vus %d: want at least 1", s.PreAllocatedVUs)
	case s.MaxVUs < s.PreAllocatedVUs:
		return fmt.Errorf("max_vus %d: want at least pre_allocated_vus (%d)", s.MaxVUs, s.PreAllocatedVUs)
	case s.GracefulStop.D() < 0:
		return errors.New("graceful_stop: must not be negative")
	case len(s.Providers) == 0:
		return errors.New("providers: want at least one")
	case s.Request.TTLSeconds < 1 || s.Request.TTLSeconds > 3600:
		return fmt.Errorf("request.ttl_seconds %d: want 1 to 3600", s.Request.TTLSeconds)
	case s.Request.Resources < 1 || s.Request.Capacity < 1:
		return errors.New("request.resources and request.capacity: want at least 1")
	case s.Request.FailureShare < 0 || s.Request.FailureShare > 1:
		return fmt.Errorf("request.failure_share %v: want 0 to 1", s.Request.FailureShare)
	case s.Naive.AttemptsPerHost < 1 || s.Naive.RetryDelay.D() < 0 || s.Naive.AttemptTimeout.D() <= 0:
		return errors.New("naive: want attempts_per_host >= 1, retry_delay >= 0, attempt_timeout > 0")
	}
	groups := map[string]bool{}
	for i, g := range s.Groups {
		switch {
		case !groupName.MatchString(g):
			return fmt.Errorf("groups[%d] %q: want a lowercase letter, then up to 30 of a-z, 0-9 and '-'", i, g)
		case groups[g]:
			return fmt.Errorf("groups[%d] %q: duplicate", i, g)
		case i == 0 && g != "default":
			return fmt.Errorf("groups[0] %q: want \"default\", the group every tenant starts on", g)
		}
		groups[g] = true
	}
	if len(s.Groups) == 1 {
		return errors.New("groups: want at least two (default and another), or none")
	}
	seen := map[string]bool{}
	for i, p := range s.Providers {
		switch {
		case !providerName.MatchString(p.Name):
			return fmt.Errorf("providers[%d].name %q: want 1 to 63 of a-z, 0-9, '-' and '_'", i, p.Name)
		case seen[p.Name]:
			return fmt.Errorf("providers[%d].name %q: duplicate", i, p.Name)
		case p.Weight < 1 || p.Weight > 100:
			return fmt.Errorf("providers[%d].weight %d: want 1 to 100", i, p.Weight)
		}
		seen[p.Name] = true
	}
	for name := range s.Sidecar {
		if !seen[name] {
			return fmt.Errorf("sidecar.%s: no such provider", name)
		}
	}
	for i, f := range s.Faults {
		field := fmt.Sprintf("faults[%d]", i)
		if !seen[f.Provider] {
			return fmt.Errorf("%s.provider %q: no such provider", field, f.Provider)
		}
		if f.At.D() < 0 || f.For.D() < 0 || f.At.D() >= s.Duration.D() {
			return fmt.Errorf("%s: at %v and for %v: want 0 <= at < duration (%v) and for >= 0", field, f.At.D(), f.For.D(), s.Duration.D())
		}
		if len(s.Groups) > 0 && f.Kind != KindMove {
			return fmt.Errorf("%s.kind %q: a scenario with groups supports only move faults", field, f.Kind)
		}
		switch f.Kind {
		case KindMove:
			switch {
			case len(s.Groups) == 0:
				return fmt.Errorf("%s: a move needs the scenario's groups", field)
			case !groups[f.Group]:
				return fmt.Errorf("%s.group %q: not one of the scenario's groups %v", field, f.Group, s.Groups)
			case f.For.D() != 0:
				return fmt.Errorf("%s.for: a move is not undone; leave for out", field)
			}
		case KindDown, KindKillActive, KindBlackhole:
		case KindSlow:
			if f.Latency.D() <= 0 || f.Jitter.D() < 0 {
				return fmt.Errorf("%s: slow needs a positive latency and a non-negative jitter", field)
			}
		case KindBrownout:
			if f.Share <= 0 || f.Share > 1 {
				return fmt.Errorf("%s.share %v: want (0, 1]", field, f.Share)
			}
		case KindToxic:
			var t struct {
				Type string `json:"type"`
			}
			if len(f.Toxic) == 0 || json.Unmarshal(f.Toxic, &t) != nil || t.Type == "" {
				return fmt.Errorf("%s.toxic: want a toxiproxy toxic object with a type", field)
			}
		default:
			return fmt.Errorf("%s.kind %q: want down, kill-active, blackhole, slow, brownout, toxic or move", field, f.Kind)
		}
	}
	parsed, err := parseThresholds(s.Thresholds)
	if err != nil {
		return err
	}
	s.parsed = parsed
	return nil
}

// ParsedThresholds returns the thresholds, sorted by metric then
// expression.
func (s *Scenario) ParsedThresholds() []Threshold { return s.parsed }

// Mix returns the weighted round robin of provider names: iteration i uses
// Mix()[i%len(Mix())]. Weights 2 and 1 give [a, b, a]: smooth, the same
// order as the k6 script builds.
func (s *Scenario) Mix() []string {
	total := 0
	for _, p := range s.Providers {
		total += p.Weight
	}
	cur := make([]int, len(s.Providers))
	out := make([]string, 0, total)
	for range total {
		best := 0
		for i, p := range s.Providers {
			cur[i] += p.Weight
			if cur[i] > cur[best] {
				best = i
			}
		}
		cur[best] -= total
		out = append(out, s.Providers[best].Name)
	}
	return out
}

// FailureReport reports whether iteration i reports FAILURE: the same
// deterministic choice as the k6 script (iterations spread evenly).
func (s *Scenario) FailureReport(i int64) bool {
	if s.Request.FailureShare <= 0 {
		return false
	}
	// Iteration i fails when floor((i+1)*share) > floor(i*share).
	return math.Floor(float64(i+1)*s.Request.FailureShare) > math.Floor(float64(i)*s.Request.FailureShare)
}

// Names returns the provider names in file order.
func (s *Scenario) Names() []string {
	out := make([]string, len(s.Providers))
	for i, p := range s.Providers {
		out[i] = p.Name
	}
	return out
}

// HasFault reports whether the plan has a fault of kind for provider.
func (s *Scenario) HasFault(provider, kind string) bool {
	for _, f := range s.Faults {
		if f.Provider == provider && f.Kind == kind {
			return true
		}
	}
	return false
}

// String describes the load shape in one line.
func (s *Scenario) String() string {
	v := ""
	if s.IsShort {
		v = " (short)"
	}
	return fmt.Sprintf("%s%s: %d iterations/%v for %v, %d pre-allocated VUs, max %d, providers %s",
		s.Name, v, s.Rate, s.TimeUnit.D(), s.Duration.D(), s.PreAllocatedVUs, s.MaxVUs, strings.Join(s.Names(), ", "))
}
