package runner

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/loadtest/client"
	"github.com/repool/repool/loadtest/scenario"
	"github.com/repool/repool/loadtest/scenarios"
	"github.com/repool/repool/loadtest/summary"
)

// fakeClient records the calls of the iterations and answers them as its
// fields say.
type fakeClient struct {
	mu    sync.Mutex
	calls []string
	n     int
	// noNext: release answers without a next lease; failRelease: release
	// fails.
	noNext, failRelease bool
}

func (f *fakeClient) Acquire(_ context.Context, p, _ string, _ int) (client.Lease, client.Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	f.calls = append(f.calls, "acquire "+p)
	return client.Lease{ID: fmt.Sprint(f.n), FencingToken: "1"}, client.Result{Status: 200}
}

func (f *fakeClient) Report(context.Context, string, client.Lease, string, string) client.Result {
	panic("an iteration reports with its release, in the same call")
}

func (f *fakeClient) Release(context.Context, string, client.Lease) client.Result {
	panic("an iteration releases with next")
}

func (f *fakeClient) ReleaseNext(_ context.Context, p string, l client.Lease, outcome, _ string, _ int) (client.Lease, bool, client.Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("release %s %s %s", p, l.ID, outcome))
	if f.failRelease {
		return client.Lease{}, false, client.Result{Status: 503, Code: "circuit_open"}
	}
	if f.noNext {
		return client.Lease{}, false, client.Result{Status: 200}
	}
	f.n++
	return client.Lease{ID: fmt.Sprint(f.n), FencingToken: "1"}, true, client.Result{Status: 200}
}

func (f *fakeClient) Close() error { return nil }

func (f *fakeClient) take() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := strings.Join(f.calls, ", ")
	f.calls = nil
	return s
}

// TestIterationIsOneRoundTrip: a VU's first use of a provider acquires and
// releases with next; every later use is the one release with next, of
// the lease the previous one got. A lease that did not come, a failed
// release and a lease held for half its TTL make the next use acquire.
func TestIterationIsOneRoundTrip(t *testing.T) {
	sc, err := scenario.Load(scenarios.FS, "baseline", true)
	if err != nil {
		t.Fatal(err)
	}
	sc.Providers = []scenario.Provider{{Name: "eu", Weight: 1}, {Name: "us", Weight: 1}}
	sc.Request.FailureShare = 0.5
	f := &fakeClient{}
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	it := &iterations{sc: sc, c: f, rec: summary.NewRecorder([]string{"eu", "us"}), clock: fake, mix: []int{0, 1}, vus: make(chan *vuState, 2), t0: fake.Now()}
	ctx := context.Background()
	steps := []struct {
		iter  int64
		setup func()
		want  string
	}{
		{0, nil, "acquire eu, release eu 1 SUCCESS"},
		{1, nil, "acquire us, release us 3 FAILURE"},
		{2, nil, "release eu 2 SUCCESS"},
		{3, nil, "release us 4 FAILURE"},
		{4, func() { f.noNext = true }, "release eu 5 SUCCESS"},
		{6, func() { f.noNext = false }, "acquire eu, release eu 7 SUCCESS"},
		{8, func() { f.failRelease = true }, "release eu 8 SUCCESS"},
		{10, func() { f.failRelease = false }, "acquire eu, release eu 9 SUCCESS"},
		{12, func() {
			// Just short of half its TTL, the lease this VU holds is used.
			fake.Advance(time.Duration(sc.Request.TTLSeconds)*time.Second/2 - time.Millisecond)
		}, "release eu 10 SUCCESS"},
		{14, func() {
			// Once it has been held for half its TTL, the VU asks for another.
			fake.Advance(time.Duration(sc.Request.TTLSeconds) * time.Second / 2)
		}, "acquire eu, release eu 12 SUCCESS"},
	}
	for _, st := range steps {
		if st.setup != nil {
			st.setup()
		}
		it.run(ctx, st.iter)
		if got := f.take(); got != st.want {
			t.Fatalf("iteration %d: calls = %q, want %q", st.iter, got, st.want)
		}
	}
}
