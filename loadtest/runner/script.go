package runner

import (
	"context"
	"fmt"
	"os"

	"github.com/repool/repool/loadtest/k6js"
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
	k, err := startForK6(ctx, o)
	if err != nil {
		return false, err
	}
	defer k.close()
	defer k.c.stop() // the script's teardown() stops the plan; this covers an error

	env := map[string]string{"SCENARIO": o.Scenario, "SIDECAR": k.topo.SidecarURL(), "FAULTS": k.faults}
	if o.Short {
		env["SHORT"] = "1"
	}
	if o.JSON != "" {
		env["SUMMARY_JSON"] = o.JSON
	}
	fmt.Fprintf(o.Out, "%s\n  script:  %s (k6 API subset of %s, in goja)\n  sidecar: %s\n\n", k.sc, script, k6js.K6Version, k.topo.SidecarURL())
	res, err := k6js.Run(ctx, k6js.Options{Script: script, Env: env, Stdout: o.Out, Stderr: os.Stderr})
	if err != nil {
		return false, err
	}
	if err := k.c.plan.err(); err != nil {
		return false, err
	}
	return res.ThresholdsOK, nil
}
