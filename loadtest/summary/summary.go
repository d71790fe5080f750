package summary

import (
	"math"
	"sort"
	"time"

	"github.com/repool/repool/loadtest/arrival"
	"github.com/repool/repool/loadtest/scenario"
)

// Input is what Compute needs about a finished run.
type Input struct {
	// Mode is "sidecar" or "naive".
	Mode     string
	Scenario *scenario.Scenario
	Stats    arrival.Stats
	// Windows are the faults' time spans, as applied.
	Windows []Window
	// Moves are what the plan's moves measured, in plan order.
	Moves     []Move
	Recorder  *Recorder
	StartedAt time.Time
}

// Summary is a run's result; its JSON form is the -json file.
type Summary struct {
	Mode                  string                    `json:"mode"`
	Scenario              string                    `json:"scenario"`
	Short                 bool                      `json:"short"`
	StartedAt             time.Time                 `json:"started_at"`
	DurationS             float64                   `json:"duration_s"`
	ElapsedS              float64                   `json:"elapsed_s"`
	TargetRate            float64                   `json:"target_iterations_per_s"`
	Iterations            int64                     `json:"iterations"`
	IterationsPerS        float64                   `json:"iterations_per_s"`
	DroppedIterations     int64                     `json:"dropped_iterations"`
	InterruptedIterations int64                     `json:"interrupted_iterations"`
	PreAllocatedVUs       int                       `json:"pre_allocated_vus"`
	MaxVUs                int64                     `json:"max_vus"`
	PeakActiveVUs         int64                     `json:"peak_active_vus"`
	Requests              int64                     `json:"requests"`
	RequestsPerS          float64                   `json:"requests_per_s"`
	ChecksRate            float64                   `json:"checks_rate"`
	Latency               Latency                   `json:"latency"`
	IterationDuration     Latency                   `json:"iteration_duration"`
	Providers             map[string]*ProviderStats `json:"providers"`
	Faults                []Window                  `json:"faults"`
	Events                []Event                   `json:"events"`
	Thresholds            []ThresholdResult         `json:"thresholds"`
	ThresholdsOK          bool                      `json:"thresholds_ok"`
	// Targets are the degraded-cluster targets (targets.go), reported, not
	// enforced: the exit status follows the thresholds only.
	Targets []Target `json:"targets"`
	// Rebalance is set in a run with a move (scenario rebalance): the
	// calls before, during and after it, per provider.
	Rebalance *Rebalance `json:"rebalance,omitempty"`
	// Series are per-second buckets per provider, for charts.
	Series map[string][]Bucket `json:"series"`
	// VUs are per-second VU counts.
	VUs []VUBucket `json:"vus"`

	providerOrder []string
	samples       []Sample
	iters         []iteration
	checksOK      int64
	checksBad     int64
}

// Latency is a trend's aggregates, in milliseconds.
type Latency struct {
	Count int64   `json:"count"`
	AvgMS float64 `json:"avg_ms"`
	MinMS float64 `json:"min_ms"`
	P50MS float64 `json:"p50_ms"`
	P90MS float64 `json:"p90_ms"`
	P95MS float64 `json:"p95_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
}

// Stats describe a set of one provider's requests. Fast-fail shares are
// fractions of the set's failed requests.
type Stats struct {
	Requests            int64   `json:"requests"`
	Errors              int64   `json:"errors"`
	ErrorRate           float64 `json:"error_rate"`
	AvgMS               float64 `json:"avg_ms"`
	P50MS               float64 `json:"p50_ms"`
	P90MS               float64 `json:"p90_ms"`
	P95MS               float64 `json:"p95_ms"`
	P99MS               float64 `json:"p99_ms"`
	MaxMS               float64 `json:"max_ms"`
	FastFailWithin10ms  float64 `json:"fast_fail_within_10ms"`
	FastFailWithin100ms float64 `json:"fast_fail_within_100ms"`
	// FastFailMarked is the share of failed requests that carried
	// X-Repool-Fast-Fail.
	FastFailMarked float64 `json:"fast_fail_marked"`
	// Refused counts the failed requests the sidecar refused itself, as
	// it judged the provider slow or down by the time its answers took
	// (bulkhead-full, circuit-open: knownBadAnswer).
	Refused int64 `json:"refused"`
}

// ProviderStats are one provider's numbers: over the whole run, and over
// the requests that started inside the provider's fault windows.
type ProviderStats struct {
	Stats
	// ErrorCodes counts failed requests by code.
	ErrorCodes map[string]int64 `json:"error_codes,omitempty"`
	// Fault covers requests started inside this provider's fault windows.
	Fault *Stats `json:"fault,omitempty"`
	// BreakerOpenedS is when the first circuit-open answer came, inside a
	// fault window (sidecar mode).
	BreakerOpenedS *float64 `json:"breaker_opened_s,omitempty"`
	// AfterOpenRequests and AfterOpenFailedWithin10ms: of the requests
	// started from BreakerOpenedS to the end of that fault window, how many
	// there were and the share that failed within 10 ms (the breaker's
	// half-open probes, which go to the cluster, are among them).
	AfterOpenRequests         int64    `json:"after_open_requests,omitempty"`
	AfterOpenFailedWithin10ms *float64 `json:"after_open_failed_within_10ms,omitempty"`
	// CircuitOpenWithin10ms is the share of circuit-open answers that took
	// at most 10 ms, end to end.
	CircuitOpenWithin10ms *float64 `json:"circuit_open_within_10ms,omitempty"`
}

// Bucket is one second of one provider's requests (by start time).
type Bucket struct {
	T        float64 `json:"t_s"`
	Requests int64   `json:"requests"`
	Errors   int64   `json:"errors"`
	AvgMS    float64 `json:"avg_ms"`
	P95MS    float64 `json:"p95_ms"`
	MaxMS    float64 `json:"max_ms"`
}

// VUBucket is the VU counts at the end of one second.
type VUBucket struct {
	T         float64 `json:"t_s"`
	Active    int64   `json:"active"`
	Allocated int64   `json:"allocated"`
}

// ThresholdResult is one threshold's verdict.
type ThresholdResult struct {
	Metric string  `json:"metric"`
	Expr   string  `json:"expr"`
	Value  float64 `json:"value"`
	OK     bool    `json:"ok"`
	// Error says why the threshold could not be evaluated (it fails).
	Error string `json:"error,omitempty"`
}

// Compute turns a finished run into its summary and evaluates the
// scenario's thresholds.
func Compute(in Input) *Summary {
	samples, iters, events, vus, ok, bad := in.Recorder.snapshot()
	sc := in.Scenario
	s := &Summary{
		Mode: in.Mode, Scenario: sc.Name, Short: sc.IsShort, StartedAt: in.StartedAt.UTC(),
		DurationS: sc.Duration.D().Seconds(), ElapsedS: in.Stats.Elapsed.Seconds(),
		TargetRate:        float64(sc.Rate) / sc.TimeUnit.D().Seconds(),
		Iterations:        in.Stats.Iterations,
		DroppedIterations: in.Stats.Dropped, InterruptedIterations: in.Stats.Interrupted,
		PreAllocatedVUs: sc.PreAllocatedVUs, MaxVUs: in.Stats.MaxVUs, PeakActiveVUs: in.Stats.PeakActive,
		Requests:  int64(len(samples)),
		Providers: map[string]*ProviderStats{}, Faults: in.Windows, Events: events,
		Series: map[string][]Bucket{}, providerOrder: in.Recorder.Providers(),
		samples: samples, iters: iters, checksOK: ok, checksBad: bad,
	}
	if s.Faults == nil {
		s.Faults = []Window{}
	}
	if s.Events == nil {
		s.Events = []Event{}
	}
	if el := in.Stats.Elapsed.Seconds(); el > 0 {
		s.RequestsPerS = float64(s.Requests) / el
		s.IterationsPerS = float64(s.Iterations) / el
	}
	if ok+bad > 0 {
		s.ChecksRate = float64(ok) / float64(ok+bad)
	}
	s.Latency = trend(durations(samples, func(Sample) bool { return true }))
	idur := make([]float64, len(iters))
	for i, it := range iters {
		idur[i] = ms(it.dur)
	}
	s.IterationDuration = trend(idur)

	for pi, name := range s.providerOrder {
		mine := func(x Sample) bool { return x.Provider == pi }
		ps := &ProviderStats{Stats: stats(samples, mine), ErrorCodes: map[string]int64{}}
		for _, x := range samples {
			if x.Provider == pi && x.Failed {
				code := x.Code
				switch {
				case x.FastFail == "bulkhead-full":
					code = "bulkhead_full" // an unavailable the sidecar answered itself
				case code == "":
					code = "unknown"
				}
				ps.ErrorCodes[code]++
			}
		}
		var wins []Window
		for _, w := range in.Windows {
			if w.Provider == name {
				wins = append(wins, w)
			}
		}
		if len(wins) > 0 {
			fs := stats(samples, inWindows(pi, wins))
			ps.Fault = &fs
			ps.afterOpen(samples, pi, wins)
		}
		s.Providers[name] = ps
		s.Series[name] = buckets(samples, pi, in.Stats.Elapsed)
	}
	s.VUs = vuBuckets(vus)
	s.Thresholds, s.ThresholdsOK = evaluate(s, sc.ParsedThresholds())
	var wins []Window // the degraded-cluster targets' faults: not the moves
	for _, w := range in.Windows {
		if w.Kind != scenario.KindMove {
			wins = append(wins, w)
		}
	}
	s.Targets = s.targets(wins)
	if s.Rebalance = s.rebalance(in.Moves); s.Rebalance != nil {
		s.Targets = append(s.Targets, s.Rebalance.targets(s.providerOrder)...)
	}
	return s
}

// afterOpen fills the breaker figures from circuit-open answers inside the
// provider's fault windows.
func (ps *ProviderStats) afterOpen(samples []Sample, pi int, wins []Window) {
	var openAt, until time.Duration = -1, 0
	var co, coFast int64
	for _, x := range samples {
		if x.Provider != pi || x.FastFail != "circuit-open" {
			continue
		}
		co++
		if x.Dur <= 10*time.Millisecond {
			coFast++
		}
		for _, w := range wins {
			// The answer's time, not the call's start: a call may have
			// waited to retry before the breaker opened and refused it.
			if end := x.Start + x.Dur; x.Start >= w.Start && x.Start < w.End && (openAt < 0 || end < openAt) {
				openAt, until = end, w.End
			}
		}
	}
	if co > 0 {
		v := float64(coFast) / float64(co)
		ps.CircuitOpenWithin10ms = &v
	}
	if openAt < 0 {
		return
	}
	at := secs(openAt)
	ps.BreakerOpenedS = &at
	var n, fast int64
	for _, x := range samples {
		if x.Provider == pi && x.Start >= openAt && x.Start < until {
			n++
			if x.Failed && x.Dur <= 10*time.Millisecond {
				fast++
			}
		}
	}
	ps.AfterOpenRequests = n
	if n > 0 {
		v := float64(fast) / float64(n)
		ps.AfterOpenFailedWithin10ms = &v
	}
}

func durations(samples []Sample, keep func(Sample) bool) []float64 {
	var out []float64
	for _, x := range samples {
		if keep(x) {
			out = append(out, ms(x.Dur))
		}
	}
	return out
}

func stats(samples []Sample, keep func(Sample) bool) Stats {
	var st Stats
	var d []float64
	var fast10, fast100, marked int64
	for _, x := range samples {
		if !keep(x) {
			continue
		}
		st.Requests++
		d = append(d, ms(x.Dur))
		if x.Failed {
			st.Errors++
			if x.Dur <= 10*time.Millisecond {
				fast10++
			}
			if x.Dur <= 100*time.Millisecond {
				fast100++
			}
			if x.FastFail != "" {
				marked++
			}
			if knownBadAnswer(x) {
				st.Refused++
			}
		}
	}
	t := trend(d)
	st.AvgMS, st.P50MS, st.P90MS, st.P95MS, st.P99MS, st.MaxMS = t.AvgMS, t.P50MS, t.P90MS, t.P95MS, t.P99MS, t.MaxMS
	if st.Requests > 0 {
		st.ErrorRate = float64(st.Errors) / float64(st.Requests)
	}
	if st.Errors > 0 {
		st.FastFailWithin10ms = float64(fast10) / float64(st.Errors)
		st.FastFailWithin100ms = float64(fast100) / float64(st.Errors)
		st.FastFailMarked = float64(marked) / float64(st.Errors)
	}
	return st
}

// inWindows selects provider pi's calls that started inside any of wins.
func inWindows(pi int, wins []Window) func(Sample) bool {
	return func(x Sample) bool {
		if x.Provider != pi {
			return false
		}
		for _, w := range wins {
			if x.Start >= w.Start && x.Start < w.End {
				return true
			}
		}
		return false
	}
}

// trend aggregates milliseconds as k6's Trend does.
func trend(v []float64) Latency {
	if len(v) == 0 {
		return Latency{}
	}
	sort.Float64s(v)
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return Latency{
		Count: int64(len(v)), AvgMS: sum / float64(len(v)), MinMS: v[0], MaxMS: v[len(v)-1],
		P50MS: Percentile(v, 50), P90MS: Percentile(v, 90), P95MS: Percentile(v, 95), P99MS: Percentile(v, 99),
	}
}

// Percentile is the p-th percentile (0 to 100) of sorted, interpolated
// linearly between the closest ranks as k6's Trend does; 0 when sorted is
// empty. sorted must be sorted.
func Percentile(sorted []float64, p float64) float64 {
	switch len(sorted) {
	case 0:
		return 0
	case 1:
		return sorted[0]
	}
	i := p / 100 * float64(len(sorted)-1)
	lo, hi := sorted[int(math.Floor(i))], sorted[int(math.Ceil(i))]
	return lo + (hi-lo)*(i-math.Floor(i))
}

func buckets(samples []Sample, pi int, elapsed time.Duration) []Bucket {
	n := int(elapsed/time.Second) + 1
	per := make([][]float64, n)
	errs := make([]int64, n)
	for _, x := range samples {
		if x.Provider != pi {
			continue
		}
		b := int(x.Start / time.Second)
		if b >= n {
			b = n - 1
		}
		per[b] = append(per[b], ms(x.Dur))
		if x.Failed {
			errs[b]++
		}
	}
	out := make([]Bucket, 0, n)
	for i := range n {
		t := trend(per[i])
		out = append(out, Bucket{T: float64(i), Requests: t.Count, Errors: errs[i], AvgMS: t.AvgMS, P95MS: t.P95MS, MaxMS: t.MaxMS})
	}
	return out
}

func vuBuckets(points []VUPoint) []VUBucket {
	var out []VUBucket
	for _, p := range points {
		sec := math.Round(p.At.Seconds()*10) / 10
		out = append(out, VUBucket{T: sec, Active: p.Active, Allocated: p.Allocated})
	}
	if out == nil {
		out = []VUBucket{}
	}
	return out
}
