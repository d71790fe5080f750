package sidecar_test

import (
	"fmt"
	"testing"

	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
)

// TestReadEndpoints: GET of a resource shows its per-context statistics,
// its quarantine and the cooldown's end; GET of the collection pages
// through every resource in id order.
func TestReadEndpoints(t *testing.T) {
	addr, key := realServer(t)
	h := start(t, config.Config{Providers: map[string]config.Provider{"demo": {Endpoint: addr, APIKey: key}}}, sidecar.Options{})
	const p = "/v1/providers/demo"
	h.do("POST", p+"/resources", `{"resources":[{"id":"a","labels":{"region":"eu"}},{"id":"b"},{"id":"c"}]}`)
	for i := 0; i < 5; i++ {
		if r := h.do("POST", p+"/reports", `{"resource_id":"a","context":"search","outcome":"FAILURE"}`); r.status != 200 {
			t.Fatalf("report = %d %s", r.status, r.raw)
		}
	}
	r := h.do("GET", p+"/resources/a", "")
	res, _ := r.body["resource"].(map[string]any)
	ctxs, _ := res["contexts"].([]any)
	if r.status != 200 || res["id"] != "a" || len(ctxs) != 1 {
		t.Fatalf("GET resource = %d %s, want a with one context", r.status, r.raw)
	}
	c := ctxs[0].(map[string]any)
	if c["context"] != "search" || c["quarantine"] != "blocked" || c["blocked_until"] == nil || c["consecutive_failures"] != 5.0 {
		t.Fatalf("context stats = %v, want search blocked after 5 failures, with the cooldown's end", c)
	}
	if res["quarantine"] != "none" {
		t.Fatalf("whole resource quarantine = %v, want none", res["quarantine"])
	}
	if r = h.do("GET", p+"/resources/zzz", ""); r.status != 404 || r.errCode() != "not_found" {
		t.Fatalf("GET unknown resource = %d %s, want 404 not_found", r.status, r.raw)
	}

	var ids []any
	token := ""
	for page := 0; page < 5; page++ {
		r = h.do("GET", fmt.Sprintf("%s/resources?page_size=2&page_token=%s", p, token), "")
		if r.status != 200 {
			t.Fatalf("list = %d %s", r.status, r.raw)
		}
		for _, x := range r.body["resources"].([]any) {
			ids = append(ids, x.(map[string]any)["id"])
		}
		token, _ = r.body["next_page_token"].(string)
		if token == "" {
			break
		}
	}
	if fmt.Sprint(ids) != "[a b c]" {
		t.Fatalf("listed %v, want [a b c] over two pages", ids)
	}
	for _, q := range []string{"page_size=0", "page_size=x", "page_size=1001", "size=2", "page_token=%21"} {
		if r = h.do("GET", p+"/resources?"+q, ""); r.status != 400 || r.errCode() != "invalid_argument" {
			t.Errorf("list ?%s = %d %s, want 400 invalid_argument", q, r.status, r.raw)
		}
	}
}
