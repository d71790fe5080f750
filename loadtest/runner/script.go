package runner

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/repool/repool/loadtest/k6js"
	"github.com/repool/repool/loadtest/topology"
)

// RunScript runs a k6 script (loadtest/k6/repool.js) for real against the
// scenario's topology: it starts the topology with the sidecar and the
// fault controller, as Serve does, and runs the script's own code in
// loadtest/k6js with the environment k6 would get from Serve's command
// line (SCENARIO, SHORT, SIDECAR, FAULTS, and SUMMARY_JSON from o.JSON).
// The script's setup() starts the fault plan; its handleSummary writes
// the summary. It returns the thresholds' verdict.
func RunScript(ctx context.Context, o Options, script string) (thresholdsOK bool, err error) {
	o.applyDefaults()
	sc, err := LoadScenario(o.Scenario, o.Short)
	if err != nil {
		return false, err
	}
	pg, release, err := openStore(ctx, &o)
	if err != nil {
		return false, err
	}
	defer release()
	dir, err := WorkDir(o.Dir, sc.Name)
	if err != nil {
		return false, err
	}
	if !o.Keep {
		defer os.RemoveAll(dir)
	}
	c := &controller{}
	tc := topologyConfig(sc, true)
	tc.Postgres, tc.Dir, tc.Event, tc.Log = pg, dir, c.event, o.Log
	topo, err := topology.Start(ctx, tc)
	if err != nil {
		return false, err
	}
	defer topo.Close()
	c.plan = newPlan(sc, topo, c.addEvent)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return false, err
	}
	srv := &http.Server{Handler: c.handler(ctx), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	defer c.stop() // the script's teardown() stops the plan; this covers an error

	env := map[string]string{"SCENARIO": o.Scenario, "SIDECAR": topo.SidecarURL(), "FAULTS": "http://" + ln.Addr().String()}
	if o.Short {
		env["SHORT"] = "1"
	}
	if o.JSON != "" {
		env["SUMMARY_JSON"] = o.JSON
	}
	fmt.Fprintf(o.Out, "%s\n  script:  %s (k6 API subset of %s, in goja)\n  sidecar: %s\n\n", sc, script, k6js.K6Version, topo.SidecarURL())
	res, err := k6js.Run(ctx, k6js.Options{Script: script, Env: env, Stdout: o.Out, Stderr: os.Stderr})
	if err != nil {
		return false, err
	}
	if err := c.plan.err(); err != nil {
		return false, err
	}
	return res.ThresholdsOK, nil
}
