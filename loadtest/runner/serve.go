package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/loadtest/scenario"
	"github.com/repool/repool/loadtest/summary"
	"github.com/repool/repool/loadtest/topology"
)

// Serve starts the scenario's topology with the sidecar, and a fault
// controller through which a k6 run starts the fault plan on its own
// clock, prints both addresses and the k6 command, and waits for ctx. The
// controller (HTTP on loopback) answers:
//
//	POST /start   starts the fault plan now (k6's setup() calls it); 409 if started
//	POST /stop    reverts the faults still applied (k6's teardown() calls it)
//	GET  /events  {"started": bool, "faults": [...], "events": [...]}
//
// o.Mode is ignored (k6 calls the sidecar). Serve returns ctx's error once
// ctx ends, or an error naming the faults of the plan that failed to apply.
func Serve(ctx context.Context, o Options) error {
	o.applyDefaults()
	k, err := startForK6(ctx, o)
	if err != nil {
		return err
	}
	defer k.close()
	fmt.Fprintf(o.Out, `%s
  sidecar: %s
  faults:  %s   (POST /start begins the fault plan; the k6 script's setup() does it)
  logs:    %s

Run k6 against it (from the repository root):
  k6 run -e SCENARIO=%s%s -e SIDECAR=%s -e FAULTS=%s loadtest/k6/repool.js

Ctrl-C stops everything.
`, k.sc, k.topo.SidecarURL(), k.faults, k.dir, k.sc.Name, map[bool]string{true: " -e SHORT=1"}[k.sc.IsShort], k.topo.SidecarURL(), k.faults)
	<-ctx.Done()
	k.c.stop()
	if err := k.c.plan.err(); err != nil {
		return err
	}
	return ctx.Err()
}

// k6Run is what Serve and RunScript start for k6: o's scenario, its
// topology with the sidecar in a work directory, and the fault controller
// on loopback.
type k6Run struct {
	sc     *scenario.Scenario
	dir    string
	topo   *topology.Topology
	c      *controller
	faults string // the controller's URL
	undo   []func()
}

// startForK6 starts the k6Run of o (defaults applied); on error it has
// undone what it started.
func startForK6(ctx context.Context, o Options) (_ *k6Run, err error) {
	k := &k6Run{c: &controller{clock: o.Clock}}
	defer func() {
		if err != nil {
			k.close()
		}
	}()
	if k.sc, err = LoadScenario(o.Scenario, o.Short); err != nil {
		return nil, err
	}
	pg, release, err := openStore(ctx, &o)
	if err != nil {
		return nil, err
	}
	k.undo = append(k.undo, release)
	if k.dir, err = WorkDir(o.Dir, k.sc.Name); err != nil {
		return nil, err
	}
	if !o.Keep {
		k.undo = append(k.undo, func() { os.RemoveAll(k.dir) })
	}
	tc := topologyConfig(k.sc, true)
	tc.Postgres, tc.Dir, tc.Event, tc.Log = pg, k.dir, k.c.event, o.Log
	if k.topo, err = topology.Start(ctx, tc); err != nil {
		return nil, err
	}
	k.undo = append(k.undo, func() { k.topo.Close() })
	k.c.plan = newPlan(k.sc, k.topo, k.c.addEvent, o.Clock)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: k.c.handler(ctx), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	k.undo = append(k.undo, func() { srv.Close() })
	k.faults = "http://" + ln.Addr().String()
	return k, nil
}

// close stops what startForK6 started, last first.
func (k *k6Run) close() {
	for i := len(k.undo) - 1; i >= 0; i-- {
		k.undo[i]()
	}
	k.undo = nil
}

// controller runs the fault plan when k6 says so.
type controller struct {
	plan  *plan
	clock clock.Clock

	mu      sync.Mutex
	t0      time.Time
	cancel  context.CancelFunc
	events  []summary.Event
	stopped bool
}

func (c *controller) event(text string) {
	c.mu.Lock()
	t0 := c.t0
	c.mu.Unlock()
	if !t0.IsZero() {
		c.addEvent(c.clock.Now().Sub(t0), text)
	}
}

func (c *controller) addEvent(at time.Duration, text string) {
	c.mu.Lock()
	c.events = append(c.events, summary.Event{At: at, AtS: at.Seconds(), Text: text})
	c.mu.Unlock()
}

func (c *controller) stop() {
	c.mu.Lock()
	cancel, started := c.cancel, !c.t0.IsZero() && !c.stopped
	c.stopped = true
	c.mu.Unlock()
	if started {
		cancel()
		c.plan.finish()
	}
}

func (c *controller) handler(ctx context.Context) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /start", func(w http.ResponseWriter, _ *http.Request) {
		c.mu.Lock()
		if !c.t0.IsZero() {
			c.mu.Unlock()
			http.Error(w, "the fault plan has started already; restart the runner for another run", http.StatusConflict)
			return
		}
		c.t0 = c.clock.Now()
		var fctx context.Context
		fctx, c.cancel = context.WithCancel(ctx)
		c.plan.start(fctx, c.t0)
		c.mu.Unlock()
		writeJSON(w, map[string]any{"started_at": c.t0.UTC(), "faults": c.plan.windows()})
	})
	mux.HandleFunc("POST /stop", func(w http.ResponseWriter, _ *http.Request) {
		c.stop()
		writeJSON(w, map[string]any{"stopped": true})
	})
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, _ *http.Request) {
		c.mu.Lock()
		events := append([]summary.Event{}, c.events...)
		started := !c.t0.IsZero()
		c.mu.Unlock()
		sort.SliceStable(events, func(i, j int) bool { return events[i].At < events[j].At })
		writeJSON(w, map[string]any{"started": started, "faults": c.plan.windows(), "events": events})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v) // an error means the client went away
}
