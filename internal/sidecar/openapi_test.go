package sidecar_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
	"github.com/repool/repool/internal/sidecar/httpapi"
)

// The OpenAPI document, loaded and validated once for every test.
var (
	specOnce   sync.Once
	specRouter routers.Router
	specErr    error
)

func openAPIRouter() (routers.Router, error) {
	specOnce.Do(func() {
		// The status page is HTML: checked as text, like /metrics.
		openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(httpapi.OpenAPI)
		if err != nil {
			specErr = err
			return
		}
		if err := doc.Validate(context.Background()); err != nil {
			specErr = err
			return
		}
		specRouter, specErr = gorillamux.NewRouter(doc)
	})
	return specRouter, specErr
}

// checkAgainstSpec validates an answer the sidecar gave to req against
// the OpenAPI document: its status must be documented for the route (or
// fall under "default", which is the error body) and its body must match
// the schema, with no field the document does not list. Requests to paths
// or methods the API does not have are answered with the error body,
// checked as such.
func checkAgainstSpec(t testing.TB, req *http.Request, status int, header http.Header, body []byte) {
	t.Helper()
	router, err := openAPIRouter()
	if err != nil {
		t.Fatalf("the OpenAPI document is not valid: %v", err)
	}
	// The router matches on the document's server, 127.0.0.1:7070.
	r := req.Clone(context.Background())
	r.URL.Scheme, r.URL.Host, r.Host = "http", "127.0.0.1:7070", "127.0.0.1:7070"
	route, params, err := router.FindRoute(r)
	if err != nil {
		if !errors.Is(err, routers.ErrPathNotFound) && !errors.Is(err, routers.ErrMethodNotAllowed) {
			t.Errorf("%s %s: finding its route in the OpenAPI document: %v", req.Method, req.URL.Path, err)
			return
		}
		// Not an endpoint: the answer is the error body; check it against
		// the schema of any route's default answer.
		r.URL.Path, r.Method = "/healthz", "GET"
		if route, params, err = router.FindRoute(r); err != nil {
			t.Errorf("finding /healthz in the OpenAPI document: %v", err)
			return
		}
		if status < 400 {
			t.Errorf("%s %s: %d for a path or method the document does not have", req.Method, req.URL.Path, status)
			return
		}
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route},
		Status:                 status,
		Header:                 header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(body)
	if strings.HasPrefix(header.Get("Content-Type"), "text/event-stream") {
		in.SetBodyBytes(nil) // a stream: only its status and type are checked
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("%s %s answered %d %s\nwhich the OpenAPI document does not allow: %v", req.Method, req.URL.Path, status, bytes.TrimSpace(body), err)
	}
}

// TestOpenAPIDocument: the document is valid OpenAPI 3, is served at GET
// /openapi.json as it is in the repository, and every route the API serves
// is in it.
func TestOpenAPIDocument(t *testing.T) {
	if _, err := openAPIRouter(); err != nil {
		t.Fatalf("the OpenAPI document is not valid: %v", err)
	}
	addr, key := realServer(t)
	h := start(t, one("demo", config.Provider{Endpoint: addr, APIKey: key}), sidecar.Options{})
	resp, err := h.client.Get(h.base + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !bytes.Equal(raw, httpapi.OpenAPI) {
		t.Fatalf("GET /openapi.json = %d, %d bytes; want the repository's document", resp.StatusCode, len(raw))
	}
	router, _ := openAPIRouter()
	for _, rt := range []struct{ method, path string }{
		{"POST", "/v1/providers/demo/resources"}, {"GET", "/v1/providers/demo/resources"},
		{"GET", "/v1/providers/demo/resources/x"}, {"DELETE", "/v1/providers/demo/resources/x"},
		{"POST", "/v1/providers/demo/acquire"}, {"POST", "/v1/providers/demo/leases/1/renew"},
		{"POST", "/v1/providers/demo/leases/1/release"}, {"POST", "/v1/providers/demo/reports"},
		{"GET", "/v1/providers/demo/events"}, {"GET", "/v1/breakers"}, {"GET", "/healthz"},
		{"GET", "/readyz"}, {"GET", "/metrics"}, {"GET", "/openapi.json"},
	} {
		req, _ := http.NewRequest(rt.method, "http://127.0.0.1:7070"+rt.path, nil)
		if _, _, err := router.FindRoute(req); err != nil {
			t.Errorf("%s %s is not in the OpenAPI document: %v", rt.method, rt.path, err)
		}
		if strings.HasSuffix(rt.path, "/events") {
			continue // a stream that does not end: served, as TestEndToEnd shows
		}
		// And the API serves it (not a 404 "no such endpoint" or a 405).
		r := h.do(rt.method, rt.path, "")
		if r.status == 405 || (r.status == 404 && r.errCode() == "not_found" && strings.Contains(r.raw, "no such endpoint")) {
			t.Errorf("%s %s is in the document but not served: %d %s", rt.method, rt.path, r.status, r.raw)
		}
	}
}

// recordTB is a testing.TB that records failures instead of failing.
type recordTB struct {
	testing.TB
	failed []string
}

func (r *recordTB) Helper()                   {}
func (r *recordTB) Errorf(f string, a ...any) { r.failed = append(r.failed, fmt.Sprintf(f, a...)) }
func (r *recordTB) Fatalf(f string, a ...any) { r.failed = append(r.failed, fmt.Sprintf(f, a...)) }

// TestSpecCheckCatchesDrift: the check refuses answers the document does
// not describe: a field it does not list, a wrong type, an undocumented
// error code, a success on a path it does not have.
func TestSpecCheckCatchesDrift(t *testing.T) {
	json := http.Header{"Content-Type": []string{"application/json"}}
	for _, tt := range []struct {
		name, method, path string
		status             int
		body               string
		ok                 bool
	}{
		{"healthz as documented", "GET", "/healthz", 200, `{"status":"ok","providers":1}`, true},
		{"an extra field", "GET", "/healthz", 200, `{"status":"ok","providers":1,"uptime":3}`, false},
		{"a wrong type", "GET", "/healthz", 200, `{"status":"ok","providers":"1"}`, false},
		{"an error as documented", "POST", "/v1/providers/p/acquire", 429, `{"error":{"code":"no_resource_available","message":"m","why":"all_leased","retry_after_ms":1000}}`, true},
		{"an undocumented code", "POST", "/v1/providers/p/acquire", 429, `{"error":{"code":"busy","message":"m"}}`, false},
		{"a release's next lease", "POST", "/v1/providers/p/leases/1/release", 200, `{"next":{"lease":{"lease_id":"2","resource_id":"r","context":"c","fencing_token":"2","expires_at":"2026-01-01T00:00:00Z"}}}`, true},
		{"a release's next with both", "POST", "/v1/providers/p/leases/1/release", 200, `{"next":{"lease":{},"error":{}}}`, false},
		{"a success off the map", "GET", "/v1/nothing", 200, `{}`, false},
	} {
		rec := &recordTB{TB: t}
		req, _ := http.NewRequest(tt.method, "http://127.0.0.1:7070"+tt.path, nil)
		checkAgainstSpec(rec, req, tt.status, json, []byte(tt.body))
		if got := len(rec.failed) == 0; got != tt.ok {
			t.Errorf("%s: check passed = %v, want %v (%v)", tt.name, got, tt.ok, rec.failed)
		}
	}
}
