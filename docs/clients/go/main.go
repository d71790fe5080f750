// Command go is a backend's loop against the repool sidecar, with Go's
// standard library only:
//
//	SIDECAR=http://127.0.0.1:7070 PROVIDER=default go run ./docs/clients/go
//
// It registers three resources, acquires a lease once, then releases with
// the outcome, the use's measured latency (latency_ms) and "next" once per
// use (one round trip per use) and reads a resource back; then it keeps a
// session's work on one resource with an affinity key, which moves to
// another resource (lease "rebound") after a failure. A
// transient answer (the sidecar's retry_after_ms says when to come back) is
// retried, a release's too.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"time"
)

// Lease is a lease as the sidecar answers it.
type Lease struct {
	LeaseID      string `json:"lease_id"`
	ResourceID   string `json:"resource_id"`
	FencingToken string `json:"fencing_token"`
	// Rebound: the affinity key asked with moved to this resource.
	Rebound bool `json:"rebound"`
}

// APIError is the sidecar's {"error":{...}}.
type APIError struct {
	Status       int
	Code         string `json:"code"`
	Message      string `json:"message"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	Why          string `json:"why"`
}

func (e *APIError) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

// wait is how long to wait before trying again.
func (e *APIError) wait() time.Duration {
	if e.RetryAfterMS > 0 {
		return time.Duration(e.RetryAfterMS) * time.Millisecond
	}
	return time.Second
}

var base = env("SIDECAR", "http://127.0.0.1:7070") + "/v1/providers/" + env("PROVIDER", "default")

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

var client = &http.Client{Timeout: 10 * time.Second}

// calls counts the round trips to the sidecar.
var calls int

// call sends body (if not nil) as JSON and decodes the answer into out.
func call(method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	calls++
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error APIError }
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
			return fmt.Errorf("%s %s: %d", method, path, resp.StatusCode)
		}
		e.Error.Status = resp.StatusCode
		return &e.Error
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// transient reports whether an error is worth trying again after e.wait().
func transient(e *APIError) bool {
	switch e.Code {
	case "no_resource_available", "rate_limited", "circuit_open", "unavailable", "deadline_exceeded":
		return true
	}
	return false
}

// Next is a release's next lease, or why there is none.
type Next struct {
	Lease *Lease
	Error *APIError
}

// release releases a lease, retrying a transient answer: safe, since the
// lease id and fencing token name this one lease. A retry that finds the
// lease gone (not_found) means an earlier try released it and its answer was
// lost: released, with no next lease (one granted then expires with its TTL).
//
// took, how long the use took, steers a tenant whose objective is
// success_per_time; 0 sends none.
func release(lease Lease, outcome string, took time.Duration, next map[string]any) (Next, error) {
	body := map[string]any{"fencing_token": lease.FencingToken, "outcome": outcome}
	if took > 0 {
		body["latency_ms"] = max(1, took.Round(time.Millisecond).Milliseconds())
	}
	if next != nil {
		body["next"] = next
	}
	for retried := false; ; retried = true {
		var ans struct{ Next Next }
		err := call("POST", "/leases/"+lease.LeaseID+"/release", body, &ans)
		e, ok := err.(*APIError)
		switch {
		case err == nil:
			return ans.Next, nil
		case ok && retried && e.Code == "not_found":
			return Next{}, nil
		case ok && transient(e):
			time.Sleep(e.wait())
		default:
			return Next{}, err
		}
	}
}

// acquire leases a resource for context. affinity, when not empty, is a key
// that gets the same resource while that resource serves well.
func acquire(context, affinity string) (Lease, error) {
	body := map[string]any{"context": context, "ttl_seconds": 30}
	if affinity != "" {
		body["affinity"] = affinity
	}
	for {
		var ans struct{ Lease Lease }
		err := call("POST", "/acquire", body, &ans)
		e, ok := err.(*APIError)
		switch {
		case err == nil:
			return ans.Lease, nil
		case ok && transient(e):
			time.Sleep(e.wait())
		default:
			return Lease{}, err
		}
	}
}

// use stands for the real work done with lease.ResourceID: it returns the
// outcome and how long the work took.
func use(lease Lease, i int) (outcome string, took time.Duration) {
	started := time.Now()
	time.Sleep(2 * time.Millisecond)
	outcome = "SUCCESS"
	if i%5 == 0 {
		outcome = "FAILURE"
	}
	return outcome, time.Since(started)
}

// session is work that must stay on one resource (a login, a cart): every
// lease under the affinity key is the same resource while it succeeds;
// after a FAILURE the key is bound to another one and the lease says
// "rebound" (log in again there). It returns how many of uses stayed on the
// first resource and whether the failure moved the key.
func session(key string, uses int) (same int, moved bool, err error) {
	next := map[string]any{"context": "checkout", "ttl_seconds": 30, "affinity": key}
	lease, err := acquire("checkout", key)
	if err != nil {
		return 0, false, err
	}
	first := lease.ResourceID
	for range uses {
		n, err := release(lease, "SUCCESS", 0, next)
		if err != nil || n.Lease == nil {
			return same, false, fmt.Errorf("release with next under %s: %v, %+v", key, err, n.Error)
		}
		lease = *n.Lease
		if lease.ResourceID == first {
			same++
		}
	}
	n, err := release(lease, "FAILURE", 0, next)
	if err != nil || n.Lease == nil {
		return same, false, fmt.Errorf("release FAILURE with next under %s: %v, %+v", key, err, n.Error)
	}
	_, err = release(*n.Lease, "SUCCESS", 0, nil)
	return same, n.Lease.Rebound && n.Lease.ResourceID != first, err
}

func main() {
	var reg struct{ Registered, Existing int }
	res := []map[string]any{{"id": "go-0", "capacity": 2}, {"id": "go-1", "capacity": 2}, {"id": "go-2", "capacity": 2}}
	if err := call("POST", "/resources", map[string]any{"resources": res}, &reg); err != nil {
		log.Fatal(err)
	}
	lease, err := acquire("search", "")
	if err != nil {
		log.Fatal(err)
	}
	uses, start := 0, calls
	failedNext, sameAfterFailure := 0, 0 // a FAILURE's next lease: another resource, by default
	for i := 0; i < 50; i++ {
		outcome, took := use(lease, i)
		next, err := release(lease, outcome, took, map[string]any{"context": "search", "ttl_seconds": 30})
		if err != nil {
			log.Fatal(err)
		}
		uses++
		if next.Lease != nil {
			if outcome == "FAILURE" {
				failedNext++
				if next.Lease.ResourceID == lease.ResourceID {
					sameAfterFailure++
				}
			}
			lease = *next.Lease
			continue
		}
		// Released, but no next lease: wait as told, then acquire.
		if next.Error != nil {
			time.Sleep(next.Error.wait())
		}
		if lease, err = acquire("search", ""); err != nil {
			log.Fatal(err)
		}
	}
	trips := calls - start
	_, took := use(lease, 1)
	if _, err := release(lease, "SUCCESS", took, nil); err != nil {
		log.Fatal(err)
	}
	type resource struct {
		Resource struct {
			ID         string
			Quarantine string
			Contexts   []struct {
				Context     string
				SuccessRate float64 `json:"success_rate"`
				LatencyMS   float64 `json:"latency_ms"`
			}
		}
	}
	var last resource
	if err := call("GET", "/resources/"+lease.ResourceID, nil, &last); err != nil {
		log.Fatal(err)
	}
	latency := 0.0
	for _, c := range last.Resource.Contexts {
		if c.Context == "search" {
			latency = c.LatencyMS
		}
	}
	same, moved, err := session("cart-42", 4)
	if err != nil {
		log.Fatal(err)
	}
	rebound := "rebound"
	if !moved {
		rebound = "NOT rebound"
	}
	var got resource
	if err := call("GET", "/resources/go-0", nil, &got); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("go: %d uses in %d round trips; after %d failures the next lease was the same resource %d times; go-0 quarantine %s, %d contexts; %s search latency %.0f ms; affinity: the same resource %d of 4 times, %s after a failure\n",
		uses, trips, failedNext, sameAfterFailure, got.Resource.Quarantine, len(got.Resource.Contexts), last.Resource.ID, latency, same, rebound)
}
