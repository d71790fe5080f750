package runner

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/loadtest/report"
	"github.com/repool/repool/loadtest/scenario"
	"github.com/repool/repool/loadtest/scenarios"
	"github.com/repool/repool/loadtest/summary"
	"github.com/repool/repool/loadtest/topology"
)

// Stores.
const (
	StoreAuto     = "auto"
	StorePostgres = "postgres"
	StoreSQLite   = "sqlite"
)

// Options are what cmd/run's flags set.
type Options struct {
	// Scenario is a scenario's name (a file of loadtest/scenarios) or the
	// path of a .json file. Required.
	Scenario string
	// Short runs the scenario's short (CI) variant.
	Short bool
	// Mode is ModeSidecar, ModeNaive or ModeBoth. Default ModeSidecar.
	Mode string
	// Store is StoreAuto (PostgreSQL HA when PostgreSQL is installed,
	// else SQLite), StorePostgres or StoreSQLite. Default StoreAuto.
	Store string
	// JSON and HTML, when set, are where the JSON summary and the HTML
	// report are written.
	JSON, HTML string
	// Dir is where work directories are made (default the system's
	// temporary directory); Keep keeps them (logs, configurations).
	Dir  string
	Keep bool
	// Out receives the summaries and the before/after table. Default
	// os.Stdout.
	Out io.Writer
	// Progress receives the progress bar; nil for none.
	Progress    io.Writer
	Interactive bool
	// Log receives progress messages. Default discards them.
	Log *slog.Logger
	// Postgres, when set, is the cluster to use instead of starting one
	// (tests share one); Store is then ignored.
	Postgres *topology.Postgres
	// Clock schedules the runs and their fault plans (Config.Clock).
	// Default the wall clock (clock.Real).
	Clock clock.Clock
}

// Result is what Execute measured.
type Result struct {
	Scenario *scenario.Scenario
	// Runs are the summaries: one, or naive then sidecar for ModeBoth.
	Runs []*summary.Summary
	// Comparison is the before/after table of ModeBoth.
	Comparison *summary.Comparison
}

// ThresholdsOK reports whether the thresholds held in the sidecar run (or
// the only run): the naive run is the "before" and is expected to cross
// them.
func (r *Result) ThresholdsOK() bool {
	last := r.Runs[len(r.Runs)-1]
	return last.ThresholdsOK
}

// LoadScenario finds a scenario by name among the shipped ones, or reads a
// .json file.
func LoadScenario(name string, short bool) (*scenario.Scenario, error) {
	if strings.HasSuffix(name, ".json") {
		raw, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		s, err := scenario.Parse(raw, short)
		if err != nil {
			return nil, fmt.Errorf("scenario %s: %w", name, err)
		}
		return s, nil
	}
	return scenario.Load(scenarios.FS, name, short)
}

// applyDefaults puts defaults in place of o's zero values; the one place
// they are applied.
func (o *Options) applyDefaults() {
	if o.Mode == "" {
		o.Mode = ModeSidecar
	}
	if o.Store == "" {
		o.Store = StoreAuto
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}

// openStore returns the PostgreSQL cluster that holds the servers'
// databases for o.Store, and how to release it: o.Postgres when set (kept
// running); a throwaway cluster started here (stopped by release) for
// StorePostgres, and for StoreAuto when PostgreSQL is installed; nil for
// StoreSQLite and for StoreAuto without PostgreSQL (a note to o.Out says
// so). Any other Store is an error.
func openStore(ctx context.Context, o *Options) (pg *topology.Postgres, release func(), err error) {
	nothing := func() {}
	switch {
	case o.Postgres != nil:
		return o.Postgres, nothing, nil
	case o.Store == StoreAuto && topology.PostgresBinDir() == "":
		fmt.Fprintln(o.Out, "note: PostgreSQL is not installed: each provider runs one SQLite server (no standby: nothing takes over from a killed server)")
		return nil, nothing, nil
	case o.Store == StoreAuto || o.Store == StorePostgres:
		if pg, err = topology.StartPostgres(ctx); err != nil {
			return nil, nil, err
		}
		return pg, func() { pg.Close() }, nil
	case o.Store == StoreSQLite:
		return nil, nothing, nil
	}
	return nil, nil, fmt.Errorf("store %q: want auto, postgres or sqlite", o.Store)
}

// Execute runs the scenario in the chosen modes, prints the summaries (and
// the before/after table) to Out, and writes the JSON and HTML files. A
// fault of the plan that fails to apply is an error (see Run).
func Execute(ctx context.Context, o Options) (*Result, error) {
	o.applyDefaults()
	modes := map[string][]string{ModeSidecar: {ModeSidecar}, ModeNaive: {ModeNaive}, ModeBoth: {ModeNaive, ModeSidecar}}[o.Mode]
	if modes == nil {
		return nil, fmt.Errorf("mode %q: want sidecar, naive or both", o.Mode)
	}
	sc, err := LoadScenario(o.Scenario, o.Short)
	if err != nil {
		return nil, err
	}
	if len(sc.Groups) > 0 {
		// The naive client walks one provider's hosts; tenants on groups
		// are routed by HAProxy on the entry only the sidecar sends.
		switch o.Mode {
		case ModeNaive:
			return nil, fmt.Errorf("scenario %s runs tenants on groups of servers behind HAProxy: -mode naive does not apply (use sidecar)", sc.Name)
		case ModeBoth:
			fmt.Fprintf(o.Out, "note: scenario %s runs through the sidecar only (its tenants are routed by HAProxy on the entry the sidecar sends)\n", sc.Name)
			modes, o.Mode = []string{ModeSidecar}, ModeSidecar
		}
		if o.Postgres == nil && o.Store == StoreSQLite {
			return nil, fmt.Errorf("scenario %s runs tenants on groups of servers: it needs PostgreSQL (-store postgres or auto)", sc.Name)
		}
	}
	pg, release, err := openStore(ctx, &o)
	if err != nil {
		return nil, err
	}
	defer release()

	res := &Result{Scenario: sc}
	for _, mode := range modes {
		dir, err := WorkDir(o.Dir, sc.Name)
		if err != nil {
			return nil, err
		}
		if !o.Keep {
			defer os.RemoveAll(dir)
		} else {
			fmt.Fprintf(o.Out, "%s run: logs and configurations in %s\n", mode, dir)
		}
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "\n%s · mode %s · starting the topology...\n", sc, mode)
		}
		s, err := Run(ctx, Config{Scenario: sc, Mode: mode, Postgres: pg, Dir: dir, Progress: o.Progress, Interactive: o.Interactive, Log: o.Log, Clock: o.Clock})
		if err != nil {
			return nil, fmt.Errorf("%s run: %w", mode, err)
		}
		s.WriteText(o.Out)
		res.Runs = append(res.Runs, s)
		if ctx.Err() != nil {
			break
		}
	}
	if len(res.Runs) == 2 {
		res.Comparison = summary.Compare(res.Runs[0], res.Runs[1])
		res.Comparison.WriteText(o.Out, sc)
	}
	if o.JSON != "" {
		if err := writeFile(o.JSON, func(w io.Writer) error { return summary.WriteJSON(w, res.jsonValue(o.Mode)) }); err != nil {
			return res, err
		}
	}
	if o.HTML != "" {
		if err := writeFile(o.HTML, func(w io.Writer) error {
			return report.Write(w, report.Input{Scenario: sc, Runs: res.Runs, Comparison: res.Comparison})
		}); err != nil {
			return res, err
		}
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, nil
}

// jsonValue is the -json document: the summary of a single run, or
// summary.Both.
func (r *Result) jsonValue(mode string) any {
	if mode != ModeBoth || len(r.Runs) != 2 {
		return r.Runs[0]
	}
	return &summary.Both{Mode: ModeBoth, Scenario: r.Scenario.Name, Runs: r.Runs, BeforeAfter: r.Comparison}
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
