// Package summary records what a load-test run measured and turns it into
// k6's numbers: the end-of-run text summary in k6's style, the JSON summary,
// threshold results, per-second series for the HTML report, and the
// before/after table of a naive run against a sidecar run.
package summary

import (
	"sort"
	"sync"
	"time"
)

// Op is one of an iteration's calls.
type Op uint8

// The calls of an iteration, in order.
const (
	Acquire Op = iota
	Report
	Release
)

var opNames = [...]string{Acquire: "acquire", Report: "report", Release: "release"}

// String returns the call's name, as the k6 script's name tag has it.
func (o Op) String() string { return opNames[o] }

// Sample is one request.
type Sample struct {
	// Start is when the request started, from the start of the run.
	Start time.Duration
	// Dur is how long it took, until the whole answer was read.
	Dur time.Duration
	// Provider indexes Recorder's providers.
	Provider int
	Op       Op
	// Failed is k6's http_req_failed: a transport error or a status
	// outside 200-399 (for gRPC, any code but OK).
	Failed bool
	// Status is the HTTP status (the naive client maps gRPC codes to the
	// sidecar's HTTP statuses); 0 for a transport error.
	Status int
	// Code is the error code ("unavailable", "circuit_open", ...).
	Code string
	// FastFail is the sidecar's X-Repool-Fast-Fail header, if any.
	FastFail string
}

// Event is something that happened during the run: a fault applied or
// reverted, a server killed, HAProxy marking a server up or down.
type Event struct {
	At   time.Duration `json:"-"`
	AtS  float64       `json:"at_s"`
	Text string        `json:"text"`
}

// Window is a fault's time span.
type Window struct {
	Provider string        `json:"provider"`
	Kind     string        `json:"kind"`
	Start    time.Duration `json:"-"`
	End      time.Duration `json:"-"`
	StartS   float64       `json:"start_s"`
	EndS     float64       `json:"end_s"`
}

// VUPoint is the VU count at one moment.
type VUPoint struct {
	At        time.Duration
	Active    int64
	Allocated int64
}

// Recorder collects a run's samples. Safe for concurrent use.
type Recorder struct {
	providers []string

	mu        sync.Mutex
	samples   []Sample
	iterDur   []iteration
	events    []Event
	vus       []VUPoint
	checksOK  int64
	checksBad int64
}

type iteration struct {
	provider int
	dur      time.Duration
}

// NewRecorder returns a recorder for the named providers.
func NewRecorder(providers []string) *Recorder {
	return &Recorder{providers: append([]string(nil), providers...), samples: make([]Sample, 0, 1<<14)}
}

// Providers returns the provider names, by index.
func (r *Recorder) Providers() []string { return r.providers }

// Add records a request and its check (k6's check that the status is 2xx).
func (r *Recorder) Add(s Sample) {
	r.mu.Lock()
	r.samples = append(r.samples, s)
	if s.Failed {
		r.checksBad++
	} else {
		r.checksOK++
	}
	r.mu.Unlock()
}

// AddIteration records a finished iteration's duration.
func (r *Recorder) AddIteration(provider int, d time.Duration) {
	r.mu.Lock()
	r.iterDur = append(r.iterDur, iteration{provider, d})
	r.mu.Unlock()
}

// AddEvent records an event.
func (r *Recorder) AddEvent(at time.Duration, text string) {
	r.mu.Lock()
	r.events = append(r.events, Event{At: at, AtS: secs(at), Text: text})
	r.mu.Unlock()
}

// AddVUs records the VU counts at a moment.
func (r *Recorder) AddVUs(p VUPoint) {
	r.mu.Lock()
	r.vus = append(r.vus, p)
	r.mu.Unlock()
}

// snapshot copies what was recorded, samples sorted by start.
func (r *Recorder) snapshot() (samples []Sample, iters []iteration, events []Event, vus []VUPoint, ok, bad int64) {
	r.mu.Lock()
	samples = append([]Sample(nil), r.samples...)
	iters = append([]iteration(nil), r.iterDur...)
	events = append([]Event(nil), r.events...)
	vus = append([]VUPoint(nil), r.vus...)
	ok, bad = r.checksOK, r.checksBad
	r.mu.Unlock()
	sort.Slice(samples, func(i, j int) bool { return samples[i].Start < samples[j].Start })
	sort.SliceStable(events, func(i, j int) bool { return events[i].At < events[j].At })
	return
}

func secs(d time.Duration) float64 { return float64(d.Round(time.Millisecond)) / float64(time.Second) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
