package sidecar_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
)

// TestOneRoundTripPerUse: against the real server, a release with next
// answers the next lease; with nothing free it releases all the same and
// answers no_resource_available with why; an Acquire on an empty pool is
// 429 no_resource_available (why none_registered), never counted by the
// breaker.
func TestOneRoundTripPerUse(t *testing.T) {
	addr, key := realServer(t)
	h := start(t, config.Config{Providers: map[string]config.Provider{"demo": {Endpoint: addr, APIKey: key}}}, sidecar.Options{})
	const p = "/v1/providers/demo"

	r := h.do("POST", p+"/acquire", `{"context":"search","ttl_seconds":30}`)
	if r.status != 429 || r.errCode() != "no_resource_available" || r.errField("why") != "none_registered" || r.header.Get("Retry-After") == "" {
		t.Fatalf("acquire on an empty pool = %d %s, want 429 no_resource_available, why none_registered, with Retry-After", r.status, r.raw)
	}
	h.do("POST", p+"/resources", `{"resources":[{"id":"proxy-1"}]}`)
	r = h.do("POST", p+"/acquire", `{"context":"search","ttl_seconds":30}`)
	lease, _ := r.body["lease"].(map[string]any)
	if r.status != 200 || lease == nil {
		t.Fatalf("acquire = %d %s", r.status, r.raw)
	}
	r = h.do("POST", p+"/acquire", `{"context":"search","ttl_seconds":30}`)
	if r.status != 429 || r.errCode() != "no_resource_available" || r.errField("why") != "all_leased" || r.errField("frees_at") == "" {
		t.Fatalf("acquire with everything leased = %d %s, want no_resource_available, all_leased, frees_at", r.status, r.raw)
	}
	for i := 0; i < 3; i++ {
		r = h.do("POST", p+"/leases/"+lease["lease_id"].(string)+"/release",
			fmt.Sprintf(`{"fencing_token":%q,"outcome":"SUCCESS","next":{"context":"search","ttl_seconds":30}}`, lease["fencing_token"]))
		next, _ := r.body["next"].(map[string]any)
		l2, _ := next["lease"].(map[string]any)
		if r.status != 200 || l2 == nil || l2["lease_id"] == lease["lease_id"] {
			t.Fatalf("release with next = %d %s, want the next lease", r.status, r.raw)
		}
		lease = l2
	}
	r = h.do("POST", p+"/leases/"+lease["lease_id"].(string)+"/release",
		fmt.Sprintf(`{"fencing_token":%q,"next":{"context":"search","ttl_seconds":30,"labels":{"tier":"gold"}}}`, lease["fencing_token"]))
	next, _ := r.body["next"].(map[string]any)
	perr, _ := next["error"].(map[string]any)
	if r.status != 200 || perr["code"] != "no_resource_available" || perr["why"] != "none_match" {
		t.Fatalf("release with a next nothing matches = %d %s, want 200 with next.error no_resource_available / none_match", r.status, r.raw)
	}
	// The release happened: the resource is free again.
	if r = h.do("POST", p+"/acquire", `{"context":"search","ttl_seconds":30}`); r.status != 200 {
		t.Fatalf("acquire after the release = %d %s", r.status, r.raw)
	}
	if b := h.breaker("demo"); b["state"] != "closed" {
		t.Fatalf("breaker = %v, want closed: no resource is not a failure", b)
	}
}

// TestRefusalsAreInOurWords: a body the sidecar refuses is answered in our
// words, naming the field and what is allowed, never with the JSON
// library's text.
func TestRefusalsAreInOurWords(t *testing.T) {
	addr, key := realServer(t)
	h := start(t, config.Config{Providers: map[string]config.Provider{"demo": {Endpoint: addr, APIKey: key}}}, sidecar.Options{})
	const p = "/v1/providers/demo"
	for _, tt := range []struct{ path, body, want string }{
		{"/acquire", `{"context":"x","ttl":30}`, `unknown field "ttl" in the request body; allowed here: context, ttl_seconds, labels`},
		{"/acquire", `{"context":"x","ttl_seconds":"abc"}`, `ttl_seconds is a string; want a whole number`},
		{"/acquire", `{"context":"x","ttl_seconds":1e10}`, `ttl_seconds is 1e10; want a whole number from -2147483648 to 2147483647`},
		{"/acquire", `{"context":`, `request body is not valid JSON`},
		{"/acquire", `[1]`, `request body is an array; want a JSON object`},
		{"/acquire", `{"context":"x","labels":{"a":1}}`, `labels.a is a number; want a string`},
		{"/resources", `{"resources":[{"id":"a","capacty":2}]}`, `unknown field "resources[0].capacty" in the request body; allowed here: id, capacity, labels`},
		{"/reports", `{"resource_id":"a","context":"x","outcome":"GOOD"}`, `outcome is "GOOD"; allowed: OUTCOME_UNSPECIFIED, SUCCESS, FAILURE, BLOCKED`},
		{"/leases/1/release", `{"fencing_token":"1","next":{"contxt":"x"}}`, `unknown field "next.contxt" in the request body; allowed here: context, ttl_seconds, labels`},
	} {
		r := h.do("POST", p+tt.path, tt.body)
		msg, _ := r.body["error"].(map[string]any)["message"].(string)
		if r.status != 400 || !strings.Contains(msg, tt.want) || strings.Contains(msg, "proto:") {
			t.Errorf("POST %s %s = %d %s, want 400 with %q", tt.path, tt.body, r.status, r.raw, tt.want)
		}
	}
}

// TestExcludeThroughTheSidecar: against the real server, "exclude" on an
// acquire and on a release's next, and "keep_failed", in the sidecar's
// JSON: after a FAILURE the next lease is another resource; every resource
// excluded is 429 no_resource_available, why all_excluded; a bad exclude is
// a 400 naming the field.
func TestExcludeThroughTheSidecar(t *testing.T) {
	addr, key := realServer(t)
	h := start(t, config.Config{Providers: map[string]config.Provider{"demo": {Endpoint: addr, APIKey: key}}}, sidecar.Options{})
	const p = "/v1/providers/demo"
	h.do("POST", p+"/resources", `{"resources":[{"id":"a","capacity":10},{"id":"b","capacity":10}]}`)
	r := h.do("POST", p+"/acquire", `{"context":"search","ttl_seconds":30,"exclude":["a"]}`)
	lease, _ := r.body["lease"].(map[string]any)
	if r.status != 200 || lease["resource_id"] != "b" {
		t.Fatalf("acquire excluding a = %d %s, want b", r.status, r.raw)
	}
	r = h.do("POST", p+"/acquire", `{"context":"search","ttl_seconds":30,"exclude":["a","b"]}`)
	if r.status != 429 || r.errCode() != "no_resource_available" || r.errField("why") != "all_excluded" {
		t.Fatalf("acquire excluding both = %d %s, want 429 no_resource_available, why all_excluded", r.status, r.raw)
	}
	r = h.do("POST", p+"/acquire", `{"context":"search","ttl_seconds":30,"exclude":"a"}`)
	if r.status != 400 || !strings.Contains(r.errField("message"), "exclude") {
		t.Fatalf("acquire with exclude as a string = %d %s, want 400 naming exclude", r.status, r.raw)
	}
	for range 4 {
		r = h.do("POST", p+"/leases/"+lease["lease_id"].(string)+"/release",
			fmt.Sprintf(`{"fencing_token":%q,"outcome":"FAILURE","next":{"context":"search","ttl_seconds":30}}`, lease["fencing_token"]))
		next, _ := r.body["next"].(map[string]any)
		l2, _ := next["lease"].(map[string]any)
		if r.status != 200 || l2 == nil || l2["resource_id"] == lease["resource_id"] {
			t.Fatalf("release FAILURE of %v with next = %d %s, want the other resource", lease["resource_id"], r.status, r.raw)
		}
		lease = l2
	}
	r = h.do("POST", p+"/leases/"+lease["lease_id"].(string)+"/release",
		fmt.Sprintf(`{"fencing_token":%q,"outcome":"FAILURE","next":{"context":"search","ttl_seconds":30,"keep_failed":true,"exclude":[%q]}}`,
			lease["fencing_token"], map[string]string{"a": "b", "b": "a"}[lease["resource_id"].(string)]))
	next, _ := r.body["next"].(map[string]any)
	if l2, _ := next["lease"].(map[string]any); r.status != 200 || l2["resource_id"] != lease["resource_id"] {
		t.Fatalf("release FAILURE with keep_failed, the other excluded = %d %s, want %v again", r.status, r.raw, lease["resource_id"])
	}
}

// TestCapacityZeroIsRefused: a resource registered with "capacity": 0 is a
// 400 that says what to write, and nothing is registered; left out, the
// capacity is 1.
func TestCapacityZeroIsRefused(t *testing.T) {
	addr, key := realServer(t)
	h := start(t, config.Config{Providers: map[string]config.Provider{"demo": {Endpoint: addr, APIKey: key}}}, sidecar.Options{})
	const p = "/v1/providers/demo"
	r := h.do("POST", p+"/resources", `{"resources":[{"id":"a"},{"id":"b","capacity":0}]}`)
	if r.status != 400 || !strings.Contains(r.errField("message"), "resources[1].capacity is 0; want 1 to 1048576") {
		t.Fatalf("register with capacity 0 = %d %s, want 400 naming resources[1].capacity", r.status, r.raw)
	}
	if r = h.do("GET", p+"/resources/a", ""); r.status != 404 {
		t.Fatalf("resource a after the refused register = %d %s, want 404: nothing registered", r.status, r.raw)
	}
	h.do("POST", p+"/resources", `{"resources":[{"id":"a"}]}`)
	res, _ := h.do("GET", p+"/resources/a", "").body["resource"].(map[string]any)
	if res["capacity"] != float64(1) {
		t.Fatalf("capacity left out = %v, want 1", res["capacity"])
	}
}

// TestLatencyThroughTheSidecar: latency_ms on a release (with next) and a
// report reaches the server, whose resource then shows the mean; a latency
// without an outcome is the server's 400, in its words.
func TestLatencyThroughTheSidecar(t *testing.T) {
	addr, key := realServer(t)
	h := start(t, config.Config{Providers: map[string]config.Provider{"demo": {Endpoint: addr, APIKey: key}}}, sidecar.Options{})
	const p = "/v1/providers/demo"
	h.do("POST", p+"/resources", `{"resources":[{"id":"proxy-1"}]}`)
	r := h.do("POST", p+"/acquire", `{"context":"search","ttl_seconds":30}`)
	lease, _ := r.body["lease"].(map[string]any)
	if r.status != 200 || lease == nil {
		t.Fatalf("acquire = %d %s", r.status, r.raw)
	}
	path := p + "/leases/" + lease["lease_id"].(string) + "/release"
	r = h.do("POST", path, fmt.Sprintf(`{"fencing_token":%q,"latency_ms":120}`, lease["fencing_token"]))
	if r.status != 400 || !strings.Contains(string(r.raw), "latency needs an outcome") {
		t.Fatalf("release with a latency and no outcome = %d %s, want 400 saying it needs an outcome", r.status, r.raw)
	}
	r = h.do("POST", path, fmt.Sprintf(`{"fencing_token":%q,"outcome":"SUCCESS","latency_ms":100,"next":{"context":"search","ttl_seconds":30}}`, lease["fencing_token"]))
	if r.status != 200 {
		t.Fatalf("release with latency_ms and next = %d %s", r.status, r.raw)
	}
	if r = h.do("POST", p+"/reports", `{"resource_id":"proxy-1","context":"search","outcome":"FAILURE","latency_ms":300}`); r.status != 200 {
		t.Fatalf("report with latency_ms = %d %s", r.status, r.raw)
	}
	r = h.do("GET", p+"/resources/proxy-1", "")
	res, _ := r.body["resource"].(map[string]any)
	ctxs, _ := res["contexts"].([]any)
	if r.status != 200 || len(ctxs) != 1 || ctxs[0].(map[string]any)["latency_ms"] != 200.0 {
		t.Fatalf("resource = %d %s, want the search context's latency_ms 200 (the mean of 100 and 300)", r.status, r.raw)
	}
}

// TestAffinityThroughTheSidecar: against the real server, "affinity" on an
// acquire and on a release's next in the sidecar's JSON: the same key gets
// the same resource after a SUCCESS and another one, "rebound": true,
// after a FAILURE; a bad key or lifetime is a 400 naming the field.
func TestAffinityThroughTheSidecar(t *testing.T) {
	addr, key := realServer(t)
	h := start(t, config.Config{Providers: map[string]config.Provider{"demo": {Endpoint: addr, APIKey: key}}}, sidecar.Options{})
	const p = "/v1/providers/demo"
	h.do("POST", p+"/resources", `{"resources":[{"id":"a","capacity":10},{"id":"b","capacity":10},{"id":"c","capacity":10}]}`)
	r := h.do("POST", p+"/acquire", `{"context":"login","ttl_seconds":30,"affinity":"alice","affinity_ttl_seconds":600}`)
	lease, _ := r.body["lease"].(map[string]any)
	if r.status != 200 || lease == nil || lease["rebound"] != false {
		t.Fatalf("acquire with affinity = %d %s, want a lease, not rebound", r.status, r.raw)
	}
	bound := lease["resource_id"]
	for range 5 {
		r = h.do("POST", p+"/leases/"+lease["lease_id"].(string)+"/release",
			fmt.Sprintf(`{"fencing_token":%q,"outcome":"SUCCESS","next":{"context":"login","ttl_seconds":30,"affinity":"alice"}}`, lease["fencing_token"]))
		next, _ := r.body["next"].(map[string]any)
		l2, _ := next["lease"].(map[string]any)
		if r.status != 200 || l2 == nil || l2["resource_id"] != bound || l2["rebound"] != false {
			t.Fatalf("release SUCCESS with next under alice = %d %s, want %v again", r.status, r.raw, bound)
		}
		lease = l2
	}
	r = h.do("POST", p+"/leases/"+lease["lease_id"].(string)+"/release",
		fmt.Sprintf(`{"fencing_token":%q,"outcome":"FAILURE","next":{"context":"login","ttl_seconds":30,"affinity":"alice"}}`, lease["fencing_token"]))
	next, _ := r.body["next"].(map[string]any)
	l2, _ := next["lease"].(map[string]any)
	if r.status != 200 || l2 == nil || l2["resource_id"] == bound || l2["rebound"] != true {
		t.Fatalf("release FAILURE with next under alice = %d %s, want another resource, rebound", r.status, r.raw)
	}
	r = h.do("POST", p+"/acquire", `{"context":"login","ttl_seconds":30,"affinity":"alice"}`)
	if got, _ := r.body["lease"].(map[string]any); r.status != 200 || got["resource_id"] != l2["resource_id"] {
		t.Fatalf("acquire under alice after the rebind = %d %s, want %v", r.status, r.raw, l2["resource_id"])
	}
	for _, bad := range []struct{ body, want string }{
		{`{"context":"login","ttl_seconds":30,"affinity":"` + strings.Repeat("k", 257) + `"}`, "affinity"},
		{`{"context":"login","ttl_seconds":30,"affinity":"k","affinity_ttl_seconds":90000}`, "affinity_ttl_seconds"},
		{`{"context":"login","ttl_seconds":30,"affinity":7}`, "affinity"},
	} {
		r = h.do("POST", p+"/acquire", bad.body)
		if r.status != 400 || !strings.Contains(r.errField("message"), bad.want) {
			t.Fatalf("acquire %s = %d %s, want 400 naming %s", bad.body[:40], r.status, r.raw, bad.want)
		}
	}
}
