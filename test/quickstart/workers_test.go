//go:build unix

package quickstart

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/repool/repool/internal/testenv"
)

// run is ./scripts/run started on free ports in a data directory.
type run struct {
	root, data string
	ports      map[string]int
	stop       func()
}

// startFresh starts ./scripts/run on free ports, in data (a new temporary
// directory when empty), with nothing but the ports and the data directory
// set: the shipped defaults.
func startFresh(t *testing.T, data string) *run {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if data == "" {
		data = t.TempDir()
	}
	r := &run{root: root, data: data, ports: map[string]int{}}
	for _, name := range []string{"grpc", "http", "sidecar"} {
		r.ports[name] = testenv.FreePort(t)
	}
	env := append(os.Environ(),
		"REPOOL_GRPC_PORT="+strconv.Itoa(r.ports["grpc"]),
		"REPOOL_HTTP_PORT="+strconv.Itoa(r.ports["http"]),
		"REPOOL_SIDECAR_PORT="+strconv.Itoa(r.ports["sidecar"]),
		"REPOOL_DATA_DIR="+data,
	)
	r.stop = startRun(t, root, env)
	return r
}

// sidecar is the base URL of the sidecar's API.
func (r *run) sidecar() string { return "http://127.0.0.1:" + strconv.Itoa(r.ports["sidecar"]) }

// jobAnswer is what a worker learns from one call.
type jobAnswer struct {
	status   int
	fastFail string
	body     map[string]any
}

// post sends one JSON call to the sidecar.
func post(client *http.Client, url string, body any) (jobAnswer, error) {
	raw, _ := json.Marshal(body)
	resp, err := client.Post(url, "application/json", bytes.NewReader(raw))
	if err != nil {
		return jobAnswer{}, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return jobAnswer{}, err
	}
	a := jobAnswer{status: resp.StatusCode, fastFail: resp.Header.Get("X-Repool-Fast-Fail")}
	if err := json.Unmarshal(out, &a.body); err != nil {
		return a, fmt.Errorf("answer %d %q: %w", resp.StatusCode, out, err)
	}
	return a, nil
}

// leaseOf returns the lease id and fencing token of an acquire's answer
// ({"lease": ...}), or "" if it holds none.
func leaseOf(m map[string]any) (id, fence string) {
	l, _ := m["lease"].(map[string]any)
	id, _ = l["lease_id"].(string)
	fence, _ = l["fencing_token"].(string)
	return id, fence
}

// tally counts the answers of one run of workers.
type tally struct {
	mu      sync.Mutex
	calls   int
	refused map[string]int // "status fast-fail code" of every 5xx answer
	errs    []error
}

func (t *tally) add(a jobAnswer, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls++
	if err != nil {
		t.errs = append(t.errs, err)
		return
	}
	if a.status >= 500 || a.fastFail != "" {
		e, _ := a.body["error"].(map[string]any)
		t.refused[fmt.Sprintf("%d %s %v: %v", a.status, a.fastFail, e["code"], e["message"])]++
	}
}

// refusals returns how many answers were refusals, and each kind with its
// count, sorted.
func (t *tally) refusals() (n int, kinds []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, c := range t.refused {
		n += c
		kinds = append(kinds, fmt.Sprintf("%d× %s", c, k))
	}
	sort.Strings(kinds)
	return n, kinds
}

// registerProxies registers n resources proxy-000… of capacity 4 through
// the sidecar's provider base URL S.
func registerProxies(t *testing.T, client *http.Client, S string, n int) {
	t.Helper()
	resources := make([]map[string]any, n)
	for i := range resources {
		resources[i] = map[string]any{"id": fmt.Sprintf("proxy-%03d", i), "capacity": 4}
	}
	if a, err := post(client, S+"/resources", map[string]any{"resources": resources}); err != nil || a.status != 200 {
		t.Fatalf("registering %d resources = %d %v (%v), want 200", n, a.status, a.body, err)
	}
}

// TestWorkersAreNeverRefused: a backend with 8, 32 and then 64 workers,
// each doing what docs/backend.md says a worker does (acquire, then one
// release with the outcome and "next" per job), against ./scripts/run as
// shipped — the sidecar's built-in defaults, bulkhead included. A healthy
// server gets every call answered: the sidecar refuses none (no 5xx, no
// fast-fail), at any of the three sizes.
func TestWorkersAreNeverRefused(t *testing.T) {
	r := startFresh(t, "")
	S := r.sidecar() + "/v1/providers/default"
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
	registerProxies(t, client, S, 256)
	const jobsPerWorker = 120
	var lines []string
	for _, workers := range []int{8, 32, 64} {
		tl := &tally{refused: map[string]int{}}
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				next := map[string]any{"context": "job", "ttl_seconds": 30}
				id, fence := "", ""
				for job := range jobsPerWorker {
					if id == "" {
						a, err := post(client, S+"/acquire", next)
						tl.add(a, err)
						if id, fence = leaseOf(a.body); id == "" {
							continue
						}
					}
					outcome := "SUCCESS"
					if (w+job)%5 == 0 {
						outcome = "FAILURE"
					}
					a, err := post(client, S+"/leases/"+id+"/release",
						map[string]any{"fencing_token": fence, "outcome": outcome, "next": next})
					tl.add(a, err)
					n, _ := a.body["next"].(map[string]any)
					id, fence = leaseOf(n)
				}
				if id != "" {
					a, err := post(client, S+"/leases/"+id+"/release", map[string]any{"fencing_token": fence, "outcome": "SUCCESS"})
					tl.add(a, err)
				}
			})
		}
		wg.Wait()
		refused, kinds := tl.refusals()
		lines = append(lines, fmt.Sprintf("%2d workers: %5d calls, %d refused, %d transport errors", workers, tl.calls, refused, len(tl.errs)))
		if refused > 0 || len(tl.errs) > 0 {
			t.Errorf("%d workers: %d of %d calls refused (%s), %d transport errors (%v); want every call answered",
				workers, refused, tl.calls, strings.Join(kinds, "; "), len(tl.errs), tl.errs)
		}
	}
	t.Logf("through ./scripts/run's sidecar, built-in defaults:\n%s", strings.Join(lines, "\n"))
	resp, err := client.Get(r.sidecar() + "/v1/breakers")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	t.Logf("GET /v1/breakers: %s", raw)
}

// TestRunKeepsSidecarEdits: ./scripts/run writes the sidecar's
// configuration on its first start only; an edit made to it is in effect
// at the next start, which follows the port variables all the same.
func TestRunKeepsSidecarEdits(t *testing.T) {
	first := startFresh(t, "")
	first.stop()
	path := filepath.Join(first.data, "sidecar.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("./scripts/run wrote no sidecar configuration: %v", err)
	}
	edited := strings.Replace(string(raw), "    api_key_file: demo.key", "    bulkhead: {min_in_flight: 6}\n    api_key_file: demo.key", 1)
	if edited == string(raw) {
		t.Fatalf("the written configuration has no api_key_file line to edit beside:\n%s", raw)
	}
	if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	second := startFresh(t, first.data) // new ports
	if got, _ := os.ReadFile(path); string(got) != edited {
		t.Fatalf("the second start rewrote the edited configuration:\n%s\nwant:\n%s", got, edited)
	}
	resp, err := http.Get(second.sidecar() + "/v1/breakers")
	if err != nil {
		t.Fatalf("the sidecar on the second start's port: %v", err)
	}
	defer resp.Body.Close()
	var view struct {
		Breakers []struct {
			Bulkhead struct {
				MinInFlight int `json:"min_in_flight"`
			} `json:"bulkhead"`
		} `json:"breakers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&view); err != nil || len(view.Breakers) != 1 || view.Breakers[0].Bulkhead.MinInFlight != 6 {
		t.Fatalf("GET /v1/breakers after the edit = %+v (%v), want one provider with the edited min_in_flight 6", view, err)
	}
	// The provider follows the new REPOOL_GRPC_PORT: calls are answered.
	a, err := post(http.DefaultClient, second.sidecar()+"/v1/providers/default/resources", map[string]any{"resources": []map[string]any{{"id": "x"}}})
	if err != nil || a.status != 200 {
		t.Fatalf("a call through the second start's sidecar = %d %v (%v), want 200", a.status, a.body, err)
	}
}

// pidOf returns the pid of the one process whose command line holds every
// one of parts.
func pidOf(t *testing.T, parts ...string) int {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var found []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmdline := strings.ReplaceAll(string(raw), "\x00", " ")
		all := true
		for _, p := range parts {
			all = all && strings.Contains(cmdline, p)
		}
		if all {
			found = append(found, pid)
		}
	}
	if len(found) != 1 {
		t.Fatalf("processes with %q in their command line = %v, want exactly one", parts, found)
	}
	return found[0]
}

// TestStallIsNotSilence: the sidecar of ./scripts/run, as shipped, is
// stopped (SIGSTOP) for 1.5 s while 32 workers call it, then continued.
// The stall is its own, not the server's: the answers that came meanwhile
// are read at once, and no call is refused, during or after it (neither the
// silence rule, 500 ms, nor the bulkhead's slow or silent verdicts count the
// stall). repool_sidecar_stalled_seconds_total shows the stall.
func TestStallIsNotSilence(t *testing.T) {
	r := startFresh(t, "")
	S := r.sidecar() + "/v1/providers/default"
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	registerProxies(t, client, S, 64)
	sidecarPID := pidOf(t, "bin/sidecar", filepath.Join(r.data, "sidecar.yaml"))

	tl := &tally{refused: map[string]int{}}
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		afterCont int // calls answered after SIGCONT
		continued bool
	)
	stop := make(chan struct{})
	for range 32 {
		wg.Go(func() {
			next := map[string]any{"context": "job", "ttl_seconds": 30}
			id, fence := "", ""
			for {
				select {
				case <-stop:
					if id != "" {
						a, err := post(client, S+"/leases/"+id+"/release", map[string]any{"fencing_token": fence, "outcome": "SUCCESS"})
						tl.add(a, err)
					}
					return
				default:
				}
				var a jobAnswer
				var err error
				if id == "" {
					a, err = post(client, S+"/acquire", next)
					id, fence = leaseOf(a.body)
				} else {
					a, err = post(client, S+"/leases/"+id+"/release", map[string]any{"fencing_token": fence, "outcome": "SUCCESS", "next": next})
					n, _ := a.body["next"].(map[string]any)
					id, fence = leaseOf(n)
				}
				tl.add(a, err)
				mu.Lock()
				if continued {
					afterCont++
				}
				mu.Unlock()
			}
		})
	}
	testenv.Eventually(t, 30*time.Second, "the workers' first 500 calls", func() bool {
		tl.mu.Lock()
		defer tl.mu.Unlock()
		return tl.calls >= 500
	})
	if err := syscall.Kill(sidecarPID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the stall itself: three times the silence rule's 500 ms
	if err := syscall.Kill(sidecarPID, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	continued = true
	mu.Unlock()
	testenv.Eventually(t, 30*time.Second, "2,000 calls answered after the stall", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return afterCont >= 2000
	})
	close(stop)
	wg.Wait()

	refused, kinds := tl.refusals()
	if refused > 0 || len(tl.errs) > 0 {
		t.Errorf("a 1.5 s stall of the sidecar under 32 workers: %d of %d calls refused (%s), %d transport errors (%v); want none: the stall is not the provider's silence",
			refused, tl.calls, strings.Join(kinds, "; "), len(tl.errs), tl.errs)
	}
	resp, err := client.Get(r.sidecar() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	stalled := -1.0
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "repool_sidecar_stalled_seconds_total "); ok {
			stalled, _ = strconv.ParseFloat(v, 64)
		}
	}
	if stalled < 1.3 || stalled > 10 {
		t.Errorf("repool_sidecar_stalled_seconds_total after a 1.5 s SIGSTOP = %v, want about 1.5 (1.3 to 10 on a busy machine)", stalled)
	}
	t.Logf("%d calls, %d refused; the sidecar counted %.2f s stalled", tl.calls, refused, stalled)
}
