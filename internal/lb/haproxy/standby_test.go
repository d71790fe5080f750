package haproxy_test

import (
	"slices"
	"testing"
	"time"

	"github.com/repool/repool/internal/lb/haproxy"
	"github.com/repool/repool/internal/lb/haproxy/haproxytest"
	"github.com/repool/repool/internal/testenv"
)

// standbyBack bounds a standby's way back to NOLB once it answers again:
// the promise (2 s). Exceeding it fails the test; the time taken is
// logged, not asserted on.
const standbyBack = 2 * time.Second

// TestRestartedStandby stops the standby (its ports closed, as a killed
// process's would be), waits until HAProxy sees it DOWN, starts it again on
// the same ports and expects it NOLB again, with the active still UP and
// the only one serving. With only the HTTP check's disable-on-404 it stayed
// DOWN (L7STS 404) for good.
func TestRestartedStandby(t *testing.T) {
	trio := haproxytest.StartTrio(t)
	rt := trio.Runtime
	haproxytest.WaitStatus(t, rt, map[string]string{"active": "UP", "standby": "NOLB", "broken": "DOWN"})

	trio.Standby.Stop()
	haproxytest.WaitStatus(t, rt, map[string]string{"active": "UP", "standby": "DOWN"})
	trio.Standby.Start(t)
	began := time.Now()
	waitStandby(t, trio, standbyBack)
	t.Logf("restarted standby NOLB after %v", time.Since(began))
}

// TestStalledStandby holds the standby's answers (as SIGSTOP would) until
// HAProxy's check times out and marks it DOWN, lets them go (SIGCONT) and
// expects it NOLB again. With only the HTTP check's disable-on-404 it
// stayed DOWN (L7STS 404) for good.
func TestStalledStandby(t *testing.T) {
	trio := haproxytest.StartTrio(t)
	rt := trio.Runtime
	haproxytest.WaitStatus(t, rt, map[string]string{"active": "UP", "standby": "NOLB", "broken": "DOWN"})

	trio.Standby.Pause()
	haproxytest.WaitStatus(t, rt, map[string]string{"active": "UP", "standby": "DOWN"})
	trio.Standby.Resume()
	began := time.Now()
	waitStandby(t, trio, standbyBack)
	t.Logf("stalled standby NOLB after %v", time.Since(began))
}

// waitStandby waits up to within for the standby to be NOLB again, then
// checks that the active server still takes every call. On its way back
// the standby must never be UP with a weight (it would take calls): the
// states seen while polling (every 10 ms) are checked.
func waitStandby(t *testing.T, trio *haproxytest.Trio, within time.Duration) {
	t.Helper()
	var last string
	var seen []string
	defer func() {
		if t.Failed() {
			t.Logf("standby last seen %s", last)
		}
	}()
	testenv.Eventually(t, within, "the standby to be NOLB", func() bool {
		servers, err := trio.Runtime.Servers()
		if err != nil {
			t.Fatalf("Servers() = got error %v, want nil", err)
		}
		for _, s := range servers {
			if s.Name == "standby" {
				last = s.Raw + " " + s.CheckStatus
				if !slices.Contains(seen, s.Raw) {
					seen = append(seen, s.Raw)
				}
				if s.Status == haproxy.StatusUp {
					t.Errorf("standby on its way back = got %s weight %d (check %s), want never UP with a weight", s.Raw, s.Weight, s.CheckStatus)
				}
				return s.Status == haproxy.StatusNOLB
			}
		}
		return false
	})
	t.Logf("standby states seen: %v", seen)
	haproxytest.WaitStatus(t, trio.Runtime, map[string]string{"active": "UP", "standby": "NOLB", "broken": "DOWN"})
	for range 3 {
		if got := haproxytest.Call(t, trio.Inv, ""); got != "active" {
			t.Errorf("Health/Check via VIP = answered by %q, want active", got)
		}
	}
}
