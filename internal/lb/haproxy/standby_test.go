package haproxy_test

import (
	"net/http"
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
	waitStandby(t, trio, "standby", "active", standbyBack)
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
	waitStandby(t, trio, "standby", "active", standbyBack)
	t.Logf("stalled standby NOLB after %v", time.Since(began))
}

// TestFormerActiveRestarted: the active server shuts down (503, not
// ready: its agent says down) while the standby takes over; restarted as
// a standby it comes back to NOLB without ever being UP at the weight it
// had as the active one: after the agent's down only its "up 0%" brings
// it back. With only the HTTP check's disable-on-404 it stayed DOWN.
func TestFormerActiveRestarted(t *testing.T) {
	trio := haproxytest.StartTrio(t)
	rt := trio.Runtime
	haproxytest.WaitStatus(t, rt, map[string]string{"active": "UP", "standby": "NOLB", "broken": "DOWN"})

	trio.Standby.SetStatus(http.StatusOK)
	trio.Active.SetStatus(http.StatusServiceUnavailable)
	haproxytest.WaitStatus(t, rt, map[string]string{"active": "DOWN", "standby": "UP"})
	trio.Active.Stop()
	trio.Active.SetStatus(http.StatusNotFound)
	trio.Active.Start(t)
	began := time.Now()
	waitStandby(t, trio, "active", "standby", standbyBack)
	t.Logf("former active NOLB after %v", time.Since(began))
}

// waitStandby waits up to within for server name to be NOLB again, then
// checks that server serving takes every call. On its way back name must
// never be UP with a weight (it would take calls): the states seen while
// polling (every 10 ms) are checked.
func waitStandby(t *testing.T, trio *haproxytest.Trio, name, serving string, within time.Duration) {
	t.Helper()
	var last string
	var seen []string
	defer func() {
		if t.Failed() {
			t.Logf("%s last seen %s", name, last)
		}
	}()
	testenv.Eventually(t, within, name+" to be NOLB", func() bool {
		servers, err := trio.Runtime.Servers()
		if err != nil {
			t.Fatalf("Servers() = got error %v, want nil", err)
		}
		for _, s := range servers {
			if s.Name == name {
				last = s.Raw + " " + s.CheckStatus
				if !slices.Contains(seen, s.Raw) {
					seen = append(seen, s.Raw)
				}
				if s.Status == haproxy.StatusUp {
					t.Errorf("%s on its way back = got %s weight %d (check %s), want never UP with a weight", name, s.Raw, s.Weight, s.CheckStatus)
				}
				return s.Status == haproxy.StatusNOLB
			}
		}
		return false
	})
	t.Logf("%s states seen: %v", name, seen)
	haproxytest.WaitStatus(t, trio.Runtime, map[string]string{serving: "UP", name: "NOLB", "broken": "DOWN"})
	for range 3 {
		if got := haproxytest.Call(t, trio.Inv, ""); got != serving {
			t.Errorf("Health/Check via VIP = answered by %q, want %s", got, serving)
		}
	}
}
