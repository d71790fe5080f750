package haproxy_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/repool/repool/internal/lb/haproxy"
	"github.com/repool/repool/internal/lb/haproxy/haproxytest"
	"github.com/repool/repool/internal/testenv"
)

// TestRuntime runs the real HAProxy on a rendered config in front of three
// fake servers (200 active, 404 standby, 503 not ready) and drives it through
// the runtime API.
func TestRuntime(t *testing.T) {
	trio := haproxytest.StartTrio(t)
	active, standby, inv, rt := trio.Active, trio.Standby, trio.Inv, trio.Runtime

	t.Run("health check states", func(t *testing.T) {
		haproxytest.WaitStatus(t, rt, map[string]string{"active": "UP", "standby": "NOLB", "broken": "DOWN"})
		// The broken server's agent marks it DOWN before its first health
		// check has ended (INI): wait for the check's own verdict.
		var servers []haproxy.ServerStatus
		testenv.Eventually(t, 10*time.Second, "every server's first health check", func() bool {
			var err error
			if servers, err = rt.Servers(); err != nil {
				t.Fatalf("Servers() = got error %v, want nil", err)
			}
			for _, s := range servers {
				if s.CheckStatus == "INI" {
					return false
				}
			}
			return true
		})
		want := []haproxy.ServerStatus{
			{Name: "active", Status: haproxy.StatusUp, CheckStatus: "L7OK", CheckCode: 200},
			{Name: "standby", Status: haproxy.StatusNOLB, CheckStatus: "L7OKC", CheckCode: 404}, // OK, conditionally
			{Name: "broken", Status: haproxy.StatusDown, CheckStatus: "L7STS", CheckCode: 503},
		}
		if len(servers) != len(want) {
			t.Fatalf("Servers() = got %+v, want %d servers", servers, len(want))
		}
		for i, w := range want {
			g := servers[i]
			if g.Name != w.Name || g.Status != w.Status || g.CheckStatus != w.CheckStatus || g.CheckCode != w.CheckCode || g.Admin != haproxy.Ready {
				t.Errorf("Servers()[%d] = got %+v, want name %s status %s check %s/%d admin ready", i, g, w.Name, w.Status, w.CheckStatus, w.CheckCode)
			}
		}
		if got := servers[0].Addr; got != net.JoinHostPort("127.0.0.1", strconv.Itoa(active.GRPCPort)) {
			t.Errorf("Servers()[0].Addr = got %s, want the gRPC port %d", got, active.GRPCPort)
		}
	})

	t.Run("traffic goes to the active server over h2", func(t *testing.T) {
		for range 3 {
			if got := haproxytest.Get(t, inv); got != "active" {
				t.Errorf("GET via VIP = answered by %q, want active", got)
			}
		}
	})

	t.Run("monitor-uri", func(t *testing.T) {
		lb1 := inv.LBHosts[0]
		url := "http://" + net.JoinHostPort(lb1.Address, strconv.Itoa(lb1.MonitorPort)) + haproxy.MonitorURI
		c := &http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get(url)
		if err != nil {
			t.Fatalf("GET %s = got error %v, want nil", url, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s = got %s, want 200", url, resp.Status)
		}
	})

	t.Run("set state", func(t *testing.T) {
		tests := []struct {
			name   string
			server string
			state  haproxy.AdminState
			force  bool
			err    error
			want   map[string]string // after the call
		}{
			{"drain last UP refused", "active", haproxy.Drain, false, haproxy.ErrLastUp, map[string]string{"active": "UP/ready"}},
			{"maint last UP refused", "active", haproxy.Maint, false, haproxy.ErrLastUp, map[string]string{"active": "UP/ready"}},
			{"unknown server", "nosuch", haproxy.Drain, false, haproxy.ErrUnknownServer, nil},
			{"maint a DOWN server", "broken", haproxy.Maint, false, nil, map[string]string{"broken": "MAINT/maint"}},
			{"ready it again", "broken", haproxy.Ready, false, nil, map[string]string{"broken": "DOWN/ready"}},
			{"drain a standby", "standby", haproxy.Drain, false, nil, map[string]string{"standby": "NOLB/drain"}},
			{"ready the standby", "standby", haproxy.Ready, false, nil, map[string]string{"standby": "NOLB/ready"}},
			{"drain last UP forced", "active", haproxy.Drain, true, nil, map[string]string{"active": "DRAIN/drain"}},
			{"ready the active", "active", haproxy.Ready, false, nil, map[string]string{"active": "UP/ready"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				err := rt.SetState(tt.server, tt.state, tt.force)
				if !isErr(err, tt.err) {
					t.Fatalf("SetState(%s, %s, force=%v) = got error %v, want %v", tt.server, tt.state, tt.force, err, tt.err)
				}
				haproxytest.WaitStatus(t, rt, tt.want)
			})
		}
	})

	t.Run("drain with another server UP", func(t *testing.T) {
		standby.SetStatus(http.StatusOK) // two UP, as during a handover
		haproxytest.WaitStatus(t, rt, map[string]string{"active": "UP", "standby": "UP"})
		if err := rt.SetState("active", haproxy.Drain, false); err != nil {
			t.Fatalf("SetState(active, drain) with standby UP = got error %v, want nil", err)
		}
		haproxytest.WaitStatus(t, rt, map[string]string{"active": "DRAIN", "standby": "UP"})
		if got := haproxytest.Get(t, inv); got != "standby" {
			t.Errorf("GET via VIP with active drained = answered by %q, want standby", got)
		}
		if err := rt.SetState("standby", haproxy.Maint, false); !isErr(err, haproxy.ErrLastUp) {
			t.Errorf("SetState(standby, maint) with active drained = got error %v, want haproxy.ErrLastUp", err)
		}
		if err := rt.SetState("active", haproxy.Ready, false); err != nil {
			t.Fatalf("SetState(active, ready) = got error %v, want nil", err)
		}
		haproxytest.WaitStatus(t, rt, map[string]string{"active": "UP"})
	})

	t.Run("close stops client-native's goroutine", func(t *testing.T) {
		before := goleak.IgnoreCurrent()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := haproxy.Dial(ctx, inv.LBHosts[0].StatsSocket)
		if err != nil {
			t.Fatalf("Dial() = got error %v, want nil", err)
		}
		if _, err := r.Servers(); err != nil {
			t.Fatalf("Servers() = got error %v, want nil", err)
		}
		r.Close()
		goleak.VerifyNone(t, before)
	})

	t.Run("handover", func(t *testing.T) {
		active.SetStatus(http.StatusNotFound) // the old leader steps down
		haproxytest.WaitStatus(t, rt, map[string]string{"active": "NOLB", "standby": "UP"})
		if got := haproxytest.Get(t, inv); got != "standby" {
			t.Errorf("GET via VIP after handover = answered by %q, want standby", got)
		}
		standby.SetStatus(http.StatusServiceUnavailable) // and the new one dies
		haproxytest.WaitStatus(t, rt, map[string]string{"active": "NOLB", "standby": "DOWN"})
	})
}

func TestDialErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	socket := filepath.Join(t.TempDir(), "missing.sock")
	if _, err := haproxy.Dial(ctx, socket); !isErr(err, haproxy.ErrRuntime) {
		t.Errorf("Dial(%s) = got error %v, want haproxy.ErrRuntime", socket, err)
	}
}

// isErr reports whether err wraps target; a nil target wants a nil err.
func isErr(err, target error) bool {
	if target == nil {
		return err == nil
	}
	return errors.Is(err, target)
}
