package abuse

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	repoolv1 "github.com/repool/repool/api/repool/v1"
)

// attackAffinityKeys: a tenant at the defaults sends 200,000 acquires
// (release with next on 4 Leases streams), each with a new 256-byte
// affinity key in a 256-byte context of its own: three times the bindings
// its share of the cell budget holds (125,000 cells, 2 a binding: 62,500).
// Every acquire is answered with a lease — the binding that expires
// soonest makes room for a new one — and the server's memory stops
// growing once the share is full: +176 MiB after 80,000 keys, +363 MiB
// after 200,000 and +352 MiB after 400,000 (load 17-22).
func attackAffinityKeys(t *testing.T, bins binaries) {
	srv := startServer(t, bins, "")
	v := newVictim(t, srv)
	key := srv.newTenant(t, "binder")
	srv.raiseRate(t, "binder")
	pc := srv.pool(t)
	if _, err := pc.Register(withKey(key), &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "p1", Capacity: 1 << 20}, {Id: "p2", Capacity: 1 << 20}}}); err != nil {
		t.Fatal(err)
	}
	before, _ := v.calls(20)
	base := srv.rss(t)
	const workers, perWorker = 4, 50_000
	pad := func(s string) string { return s + strings.Repeat("x", 256-len(s)) }
	var (
		mu     sync.Mutex
		failed []string
		peak   = base
		wg     sync.WaitGroup
	)
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			st, err := pc.Leases(withKey(key))
			if err != nil {
				mu.Lock()
				failed = append(failed, err.Error())
				mu.Unlock()
				return
			}
			defer func() { _ = st.CloseSend() }()
			var held *repoolv1.Lease
			for i := range perWorker {
				name := fmt.Sprintf("w%d-%06d-", w, i)
				acq := &repoolv1.AcquireRequest{Context: pad("ctx-" + name), TtlSeconds: 60, Affinity: pad("key-" + name)}
				call := &repoolv1.LeaseCall{Call: &repoolv1.LeaseCall_Acquire{Acquire: acq}}
				if held != nil {
					call = &repoolv1.LeaseCall{Call: &repoolv1.LeaseCall_Release{Release: &repoolv1.ReleaseRequest{
						LeaseId: held.GetLeaseId(), FencingToken: held.GetFencingToken(),
						Next: &repoolv1.NextLease{Context: acq.Context, TtlSeconds: 60, Affinity: acq.Affinity}}}}
				}
				if err := st.Send(call); err != nil {
					mu.Lock()
					failed = append(failed, err.Error())
					mu.Unlock()
					return
				}
				reply, err := st.Recv()
				held = reply.GetAcquire().GetLease()
				if held == nil {
					held = reply.GetRelease().GetNext().GetLease()
				}
				if err != nil || held == nil {
					mu.Lock()
					failed = append(failed, fmt.Sprintf("call %d: %v %v", i, err, reply))
					mu.Unlock()
					return
				}
				if i%5000 == 0 {
					r := srv.rss(t)
					mu.Lock()
					peak = max(peak, r)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	peak = max(peak, srv.rss(t))
	during, errs := v.calls(20)
	t.Logf("attack: %d acquires with new 256-byte affinity keys in 256-byte contexts in %v; server RSS %d MiB -> %d MiB (+%d MiB); victim median %v (before %v), %d errors",
		workers*perWorker, time.Since(start).Round(100*time.Millisecond), base/mib, peak/mib, (peak-base)/mib, quantile(during, 0.5), quantile(before, 0.5), len(errs))
	if len(failed) > 0 {
		t.Errorf("the binder's acquires were refused %d times (first: %s), want every one answered with a lease (the oldest binding evicted)", len(failed), failed[0])
	}
	if grown := peak - base; grown > affinityBound {
		t.Errorf("server RSS grew by %d MiB under %d affinity keys, want at most %d MiB", grown/mib, workers*perWorker, affinityBound/mib)
	}
	if len(errs) > 0 {
		t.Errorf("the victim's calls after the attack = got errors %v, want none", errs)
	}
}

// affinityBound is what one tenant's share of the cell budget in affinity
// bindings may add to the server's resident memory: 62,500 bindings of a
// 256-byte key in a 256-byte context hold 43 MiB of live heap
// (TestMemoryOfATenantsShare), beside the keys dropped and bound since the
// last flush that the next checkpoint writes; the collector (GOGC=400)
// lets the heap grow to five times what is live before it runs.
const affinityBound = 512 * mib
