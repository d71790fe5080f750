package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Load settings. Every backend call has callDeadline; the sidecar's own
// timeout (retries included; deploy/config/sidecar.yaml's, 3 s) is shorter,
// so that it answers in time (startSidecarFor checks it).
const (
	callDeadline  = 3500 * time.Millisecond
	leaseTTL      = 10 // seconds
	iterationRate = 30 // iterations started per second
	maxInFlight   = 40 // iterations at once; more are dropped (counted)
	maxHold       = 600 * time.Millisecond
	provider      = "default"
	workContext   = "e2e"
)

// outcome classifies a backend call.
type outcome int

const (
	ok        outcome = iota // 2xx
	exhausted                // acquire: no free resource (429 no_resource_available): business as usual
	rejected                 // other 4xx: the call was answered, the request refused
	failed                   // 5xx, fast-fail, or no answer within the deadline
)

func (o outcome) String() string {
	return [...]string{"ok", "exhausted", "rejected", "failed"}[o]
}

// call is one backend call through the sidecar.
type call struct {
	op         string // register, acquire, report, release
	start, end time.Time
	status     int    // HTTP status; 0 if none arrived
	code       string // error code of the body, or the client error
	message    string // error message of the body
	fastFail   string // X-Repool-Fast-Fail
	outcome    outcome
	late       bool // no answer within callDeadline
}

func (c call) String() string {
	return fmt.Sprintf("%s %s at %s: %s status=%d code=%q fast-fail=%q in %v: %s",
		c.op, c.outcome, c.start.Format("15:04:05.000"), map[bool]string{true: "LATE", false: ""}[c.late],
		c.status, c.code, c.fastFail, c.end.Sub(c.start).Round(time.Millisecond), c.message)
}

// lease is one lease a client held, as the client saw it.
type lease struct {
	id, resource string
	token        uint64
	acked        time.Time // the acquire's answer arrived
	expires      time.Time // the server's expiry
	// releaseSent is when the release was sent (zero if never): the lease
	// is certainly valid from acked until then (or its expiry).
	releaseSent time.Time
	released    bool // the release was answered 200
}

// validUntil is the end of the interval in which the lease was certainly
// valid on the server: it was granted before acked, and it cannot have
// ended before the client released it or it expired.
func (l *lease) validUntil() time.Time {
	if !l.releaseSent.IsZero() && l.releaseSent.Before(l.expires) {
		return l.releaseSent
	}
	return l.expires
}

// backend drives the sidecar over HTTP as an application backend would,
// and records every call and lease.
type backend struct {
	http *http.Client

	mu         sync.Mutex
	calls      []call
	leases     []*lease
	registered map[string]bool // acknowledged registrations
	anomalies  []string        // answers that make no sense

	inFlight atomic.Int32
	dropped  atomic.Int64
}

func newBackend() *backend {
	return &backend{
		http:       &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * maxInFlight, IdleConnTimeout: time.Minute}},
		registered: map[string]bool{},
	}
}

// apiError is the sidecar's error body.
type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// do makes one call with callDeadline and records it. It returns the body
// of a 2xx answer.
func (b *backend) do(op, path string, body any) ([]byte, outcome) {
	raw, _ := json.Marshal(body) // maps of strings and ints always encode
	ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
	defer cancel()
	c := call{op: op, start: time.Now()}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, sidecarURL(path), bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.http.Do(req)
	var answer []byte
	if err == nil {
		answer, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	c.end = time.Now()
	switch {
	case err != nil:
		c.outcome, c.code = failed, err.Error()
		c.late = errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded)
	default:
		c.status, c.fastFail = resp.StatusCode, resp.Header.Get("X-Repool-Fast-Fail")
		var e apiError
		if resp.StatusCode/100 != 2 && json.Unmarshal(answer, &e) == nil {
			c.code, c.message = e.Error.Code, e.Error.Message
		}
		switch {
		case resp.StatusCode/100 == 2:
			c.outcome = ok
		case op == "acquire" && resp.StatusCode == http.StatusTooManyRequests && c.code == "no_resource_available":
			c.outcome = exhausted
		case resp.StatusCode/100 == 4 && c.fastFail == "":
			c.outcome = rejected
		default:
			c.outcome = failed
		}
	}
	b.mu.Lock()
	b.calls = append(b.calls, c)
	b.mu.Unlock()
	if c.outcome != ok {
		return nil, c.outcome
	}
	return answer, ok
}

// resourceJSON is a resource in a register body.
type resourceJSON struct {
	ID       string `json:"id"`
	Capacity int    `json:"capacity"`
}

// register registers capacity-1 resources and remembers the acknowledged
// ones.
func (b *backend) register(ids ...string) bool {
	rs := make([]resourceJSON, len(ids))
	for i, id := range ids {
		rs[i] = resourceJSON{ID: id, Capacity: 1}
	}
	_, o := b.do("register", "/v1/providers/"+provider+"/resources", map[string]any{"resources": rs})
	if o != ok {
		return false
	}
	b.mu.Lock()
	for _, id := range ids {
		b.registered[id] = true
	}
	b.mu.Unlock()
	return true
}

// acquireAnswer is the sidecar's acquire answer.
type acquireAnswer struct {
	Lease struct {
		LeaseID      string          `json:"lease_id"`
		ResourceID   string          `json:"resource_id"`
		FencingToken json.RawMessage `json:"fencing_token"`
		ExpiresAt    time.Time       `json:"expires_at"`
	} `json:"lease"`
}

// iteration is one round of a backend: acquire, use (hold), report,
// release. Report and release are always attempted once a lease is held.
func (b *backend) iteration(rng *rand.Rand) {
	raw, o := b.do("acquire", "/v1/providers/"+provider+"/acquire", map[string]any{"context": workContext, "ttl_seconds": leaseTTL})
	if o != ok {
		return
	}
	acked := time.Now()
	var a acquireAnswer
	err := json.Unmarshal(raw, &a)
	var tok uint64
	if err == nil {
		tok, err = strconv.ParseUint(strings.Trim(string(a.Lease.FencingToken), `"`), 10, 64)
	}
	if err != nil || a.Lease.LeaseID == "" || a.Lease.ResourceID == "" {
		b.mu.Lock()
		b.anomalies = append(b.anomalies, fmt.Sprintf("acquire answered 200 with %s (%v)", raw, err))
		b.mu.Unlock()
		return
	}
	l := &lease{id: a.Lease.LeaseID, resource: a.Lease.ResourceID, token: tok, acked: acked, expires: a.Lease.ExpiresAt}
	b.mu.Lock()
	b.leases = append(b.leases, l)
	b.mu.Unlock()

	time.Sleep(time.Duration(rng.Int64N(int64(maxHold)))) // holding the lease: work against real servers' lease clocks
	outcome := "SUCCESS"
	if rng.IntN(10) == 0 {
		outcome = "FAILURE"
	}
	b.do("report", "/v1/providers/"+provider+"/reports", map[string]any{
		"resource_id": l.resource, "context": workContext, "outcome": outcome,
		"lease_id": l.id, "fencing_token": strconv.FormatUint(l.token, 10),
	})
	sent := time.Now()
	_, o = b.do("release", "/v1/providers/"+provider+"/leases/"+l.id+"/release", map[string]any{
		"fencing_token": strconv.FormatUint(l.token, 10),
	})
	b.mu.Lock()
	l.releaseSent, l.released = sent, o == ok
	b.mu.Unlock()
}

// run starts iterations at iterationRate (an open model: a slow cluster
// does not slow the arrivals; above maxInFlight they are dropped and
// counted) and registers a new resource every 250 ms, until ctx ends. It
// returns once every iteration has finished.
func (b *backend) run(ctx context.Context, registerPrefix string) {
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				b.register(fmt.Sprintf("%s%04d", registerPrefix, n))
			}
		}
	})
	t := time.NewTicker(time.Second / iterationRate)
	defer t.Stop()
	for seed := uint64(1); ; seed++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-t.C:
		}
		if b.inFlight.Add(1) > maxInFlight {
			b.inFlight.Add(-1)
			b.dropped.Add(1)
			continue
		}
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		wg.Go(func() {
			defer b.inFlight.Add(-1)
			b.iteration(rng)
		})
	}
}

// snapshot returns copies of the calls and leases recorded so far.
func (b *backend) snapshot() ([]call, []lease) {
	b.mu.Lock()
	defer b.mu.Unlock()
	calls := append([]call(nil), b.calls...)
	leases := make([]lease, len(b.leases))
	for i, l := range b.leases {
		leases[i] = *l
	}
	return calls, leases
}

// registeredIDs returns the acknowledged registrations.
func (b *backend) registeredIDs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	ids := make([]string, 0, len(b.registered))
	for id := range b.registered {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// capacityViolation is two leases of one capacity-1 resource that were
// valid at the same moment.
type capacityViolation struct {
	resource string
	a, b     lease
	why      string
}

func (v capacityViolation) String() string {
	f := func(l lease) string {
		return fmt.Sprintf("lease %s token %d (epoch %d) acked %s valid until %s", l.id, l.token, l.token>>40,
			l.acked.Format("15:04:05.000"), l.validUntil().Format("15:04:05.000"))
	}
	return fmt.Sprintf("resource %s: %s: %s / %s", v.resource, v.why, f(v.a), f(v.b))
}

// capacityViolations checks the leases of capacity-1 resources in two
// ways. Overlap: two leases certainly valid at the same moment (each from
// its acquire's answer to its release or expiry). Order: fencing tokens
// grow per pool, so on one resource, leases in the order their answers
// arrived must have growing tokens; a smaller token answered later was
// granted earlier and was still valid (unreleased, unexpired: answers
// arrive within the deadline, far below the TTL) while the other was
// granted.
func capacityViolations(leases []lease) []capacityViolation {
	byRes := map[string][]lease{}
	for _, l := range leases {
		byRes[l.resource] = append(byRes[l.resource], l)
	}
	var out []capacityViolation
	for res, ls := range byRes {
		sort.Slice(ls, func(i, j int) bool { return ls[i].acked.Before(ls[j].acked) })
		longest := 0 // the lease valid the longest among those answered so far
		for i := 1; i < len(ls); i++ {
			prev, cur := ls[i-1], ls[i]
			if cur.acked.Before(ls[longest].validUntil()) {
				out = append(out, capacityViolation{res, ls[longest], cur, "both valid at once"})
			}
			if cur.token <= prev.token {
				out = append(out, capacityViolation{res, prev, cur, "token granted earlier answered later"})
			}
			if cur.validUntil().After(ls[longest].validUntil()) {
				longest = i
			}
		}
	}
	return out
}

// startLoad runs b's load (run, its new resources named late-NNNN) until
// the function it returns is called, which waits for the load's end; tb's
// cleanup calls it too (cleanups run last first, so the load stops before
// the processes do).
func startLoad(tb testing.TB, b *backend) (end func()) {
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { b.run(ctx, "late-") })
	var once sync.Once
	end = func() { once.Do(func() { stop(); wg.Wait() }) }
	tb.Cleanup(end)
	return end
}
