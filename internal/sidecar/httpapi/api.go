// Package httpapi is the sidecar's HTTP/JSON API for backends
// (docs/sidecar.md): the PoolService calls of each provider, its event stream as
// server-sent events, the breakers view, health and metrics.
//
// Request and response bodies mirror the gRPC messages in snake case
// (protojson with proto field names); 64-bit integers such as fencing
// tokens are written as JSON strings and accepted as strings or numbers.
// Every error is JSON: {"error":{"code","message","retry_after_ms"}}.
// A request the sidecar refuses itself (unknown provider, malformed or
// oversized body, unknown field) never reaches the provider.
package httpapi

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/sidecar/provider"
)

// Handle is a provider in use by one request.
type Handle struct {
	Provider *provider.Provider
	// Release must be called once the request is done with Provider.
	Release func()
	// Retired is closed when the provider is removed from the
	// configuration; long-lived streams end then.
	Retired <-chan struct{}
}

// Providers is what the API needs from the sidecar.
type Providers interface {
	// Lookup returns the named provider, or false if there is none.
	Lookup(name string) (Handle, bool)
	// All returns every provider in effect, for the status views.
	All() []*provider.Provider
	// Names returns the names of the providers, sorted.
	Names() []string
}

// Config configures New.
type Config struct {
	// Providers looks providers up. Required.
	Providers Providers
	// Metrics serves GET /metrics. Required.
	Metrics http.Handler
	// MaxBodyBytes bounds a request body. Required.
	MaxBodyBytes int64
	// Stopping, when done, ends every event stream (the sidecar is
	// shutting down). Default: never.
	Stopping context.Context
	// Keepalive is the interval of comment lines on idle event streams.
	// Default 15s.
	Keepalive time.Duration
	// Clock schedules the keep-alive comments. Default the wall clock.
	Clock clock.Clock
	// Log receives request failures. Default discards them.
	Log *slog.Logger
	// AllowedHosts are the Host names (or addresses) accepted besides
	// loopback ones: the listen host and the configured allowed_hosts.
	AllowedHosts []string
	// AllowedOrigins are the browser origins (canonical, as
	// config.ParseOrigin returns them) whose requests are accepted.
	AllowedOrigins []string
}

// API serves the sidecar's HTTP API. It is an http.Handler, safe for
// concurrent use.
type API struct {
	providers Providers
	maxBody   int64
	stopping  context.Context
	keepalive time.Duration
	clock     clock.Clock
	log       *slog.Logger
	guard     guard
	mux       *http.ServeMux
}

var _ http.Handler = (*API)(nil)

// New returns the API.
func New(cfg Config) (*API, error) {
	if cfg.Providers == nil || cfg.Metrics == nil || cfg.MaxBodyBytes <= 0 {
		return nil, errors.New("httpapi: Config.Providers, Metrics and MaxBodyBytes are required")
	}
	if cfg.Stopping == nil {
		cfg.Stopping = context.Background()
	}
	if cfg.Keepalive <= 0 {
		cfg.Keepalive = 15 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	a := &API{providers: cfg.Providers, maxBody: cfg.MaxBodyBytes, stopping: cfg.Stopping,
		keepalive: cfg.Keepalive, clock: cfg.Clock, log: cfg.Log, guard: newGuard(cfg.AllowedHosts, cfg.AllowedOrigins), mux: http.NewServeMux()}

	routes := []struct {
		method, path string
		h            http.HandlerFunc
	}{
		{"POST", "/v1/providers/{p}/resources", unary(a, provider.MethodRegister, body[*repoolv1.RegisterRequest](a), repoolv1.PoolServiceClient.Register)},
		{"DELETE", "/v1/providers/{p}/resources/{id}", unary(a, provider.MethodDeregister, deregisterRequest, repoolv1.PoolServiceClient.Deregister)},
		{"GET", "/v1/providers/{p}/resources/{id}", unary(a, provider.MethodGetResource, getResourceRequest, repoolv1.PoolServiceClient.GetResource)},
		{"GET", "/v1/providers/{p}/resources", unary(a, provider.MethodListResources, listResourcesRequest, repoolv1.PoolServiceClient.ListResources)},
		{"POST", "/v1/providers/{p}/acquire", unary(a, provider.MethodAcquire, body[*repoolv1.AcquireRequest](a), repoolv1.PoolServiceClient.Acquire)},
		{"POST", "/v1/providers/{p}/leases/{lease}/renew", unary(a, provider.MethodRenew, a.renewRequest, repoolv1.PoolServiceClient.Renew)},
		{"POST", "/v1/providers/{p}/leases/{lease}/release", unary(a, provider.MethodRelease, a.releaseRequest, repoolv1.PoolServiceClient.Release)},
		{"POST", "/v1/providers/{p}/reports", unary(a, provider.MethodReport, body[*repoolv1.ReportRequest](a), repoolv1.PoolServiceClient.Report)},
		{"GET", "/v1/providers/{p}/events", a.events},
		{"GET", "/v1/breakers", a.breakers},
		{"GET", "/status", a.status},
		{"GET", "/healthz", a.healthz},
		{"GET", "/readyz", a.readyz},
		{"GET", "/metrics", cfg.Metrics.ServeHTTP},
		{"GET", "/openapi.json", serveOpenAPI},
	}
	allowed := map[string][]string{}
	for _, rt := range routes {
		a.mux.HandleFunc(rt.method+" "+rt.path, rt.h)
		allowed[rt.path] = append(allowed[rt.path], rt.method)
	}
	for path, methods := range allowed {
		a.mux.HandleFunc(path, methodNotAllowed(methods))
	}
	a.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeAnswer(w, answer{status: http.StatusNotFound, code: codeNotFound, msg: "no such endpoint: " + r.Method + " " + r.URL.Path})
	})
	return a, nil
}

// ServeHTTP serves the API: the guard's checks first (see guard), then the
// routes.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if ans, ok := a.guard.check(r); !ok {
		a.log.Debug("request refused", "method", r.Method, "path", r.URL.Path, "status", ans.status, "code", ans.code)
		writeAnswer(w, ans)
		return
	}
	a.mux.ServeHTTP(w, r)
}

func methodNotAllowed(methods []string) http.HandlerFunc {
	allow := ""
	for i, m := range methods {
		if i > 0 {
			allow += ", "
		}
		allow += m
	}
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeAnswer(w, answer{status: http.StatusMethodNotAllowed, code: codeMethodNotAllowed,
			msg: r.Method + " is not allowed here; allowed: " + allow})
	}
}

// lookup finds the request's provider or answers 404.
func (a *API) lookup(w http.ResponseWriter, r *http.Request) (Handle, bool) {
	name := r.PathValue("p")
	h, ok := a.providers.Lookup(name)
	if !ok {
		writeAnswer(w, answer{status: http.StatusNotFound, code: codeUnknownProvider,
			msg: "no provider named " + jsonQuote(name) + " in the sidecar's configuration"})
	}
	return h, ok
}

// rpc is a PoolServiceClient method, as a method expression.
type rpc[Req, Resp proto.Message] func(repoolv1.PoolServiceClient, context.Context, Req, ...grpc.CallOption) (Resp, error)

// unary serves one PoolService call: find the provider, build the request
// and check that it can be encoded (nothing reaches the provider, and its
// breaker sees nothing, if either fails: the caller's 400), call through
// the provider's resilience layers, answer.
func unary[Req, Resp proto.Message](a *API, method provider.Method, build func(http.ResponseWriter, *http.Request) (Req, error), call rpc[Req, Resp]) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h, ok := a.lookup(w, r)
		if !ok {
			return
		}
		defer h.Release()
		req, err := build(w, r)
		if err == nil {
			err = encodable(req)
		}
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		var resp Resp
		start := time.Now()
		err = h.Provider.Do(r.Context(), method, func(ctx context.Context, c repoolv1.PoolServiceClient, opts ...grpc.CallOption) (err error) {
			resp, err = call(c, ctx, req, opts...)
			return err
		})
		if err == nil && a.log.Enabled(r.Context(), slog.LevelDebug) {
			// With the request's context: the line carries its trace id.
			// A failed call's line is writeError's.
			a.log.DebugContext(r.Context(), "call", "route", r.Pattern, "provider", r.PathValue("p"),
				"status", http.StatusOK, "duration_ms", float64(time.Since(start).Microseconds())/1000)
		}
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		writeProto(w, http.StatusOK, resp)
	}
}

// body returns a request builder that decodes the body into a new Req.
func body[Req interface {
	proto.Message
	*T
}, T any](a *API) func(http.ResponseWriter, *http.Request) (Req, error) {
	return func(w http.ResponseWriter, r *http.Request) (Req, error) {
		req := Req(new(T))
		return req, a.decode(w, r, req)
	}
}

func deregisterRequest(_ http.ResponseWriter, r *http.Request) (*repoolv1.DeregisterRequest, error) {
	id, err := pathValue(r, "id", "resource id")
	if err != nil {
		return nil, err
	}
	return &repoolv1.DeregisterRequest{ResourceIds: []string{id}}, nil
}

func getResourceRequest(_ http.ResponseWriter, r *http.Request) (*repoolv1.GetResourceRequest, error) {
	id, err := pathValue(r, "id", "resource id")
	if err != nil {
		return nil, err
	}
	return &repoolv1.GetResourceRequest{Id: id}, nil
}

// listResourcesRequest reads ?page_size (1 to 1000; default 100) and
// ?page_token (from the previous page's next_page_token); any other query
// parameter is refused.
func listResourcesRequest(_ http.ResponseWriter, r *http.Request) (*repoolv1.ListResourcesRequest, error) {
	req := &repoolv1.ListResourcesRequest{}
	q := r.URL.Query()
	for k, v := range q {
		if len(v) > 1 {
			return nil, badRequest("query parameter %s is given %d times; give it once", k, len(v))
		}
		switch k {
		case "page_size":
			n, err := strconv.Atoi(v[0])
			if err != nil || n < 1 || n > 1000 {
				return nil, badRequest("page_size is %s; want a whole number from 1 to 1000 (default 100)", jsonQuote(v[0]))
			}
			req.PageSize = int32(n)
		case "page_token":
			if !utf8.ValidString(v[0]) {
				return nil, badRequest("page_token is not valid UTF-8; pass next_page_token of the previous page as it is")
			}
			req.PageToken = v[0]
		default:
			return nil, badRequest("unknown query parameter %s; allowed: page_size, page_token", jsonQuote(k))
		}
	}
	return req, nil
}

// pathValue returns the URL's {name}, which must be valid UTF-8: the
// provider takes only UTF-8 strings (JSON bodies are checked as they are
// decoded).
func pathValue(r *http.Request, name, what string) (string, error) {
	v := r.PathValue(name)
	if !utf8.ValidString(v) {
		return "", badRequest("%s in the URL is not valid UTF-8", what)
	}
	return v, nil
}

// encodable returns a 400 if req cannot be encoded for the provider. The
// decoders and pathValue already refuse what cannot be: this makes sure
// that nothing the caller sends is ever counted as the provider's failure,
// whatever a future field takes.
func encodable(req proto.Message) error {
	if _, err := proto.Marshal(req); err != nil {
		return badRequest("the request cannot be encoded for the provider (a string that is not valid UTF-8?)")
	}
	return nil
}

func (a *API) renewRequest(w http.ResponseWriter, r *http.Request) (*repoolv1.RenewRequest, error) {
	req := &repoolv1.RenewRequest{}
	if err := a.decode(w, r, req); err != nil {
		return nil, err
	}
	return req, leaseFromPath(r, &req.LeaseId)
}

func (a *API) releaseRequest(w http.ResponseWriter, r *http.Request) (*repoolv1.ReleaseRequest, error) {
	req := &repoolv1.ReleaseRequest{}
	if err := a.decode(w, r, req); err != nil {
		return nil, err
	}
	return req, leaseFromPath(r, &req.LeaseId)
}

// leaseFromPath sets the lease id from the URL; a different one in the
// body is a contradiction.
func leaseFromPath(r *http.Request, id *string) error {
	lease, err := pathValue(r, "lease", "lease id")
	if err != nil {
		return err
	}
	if *id != "" && *id != lease {
		return badRequest("lease_id %s in the body differs from %s in the URL", jsonQuote(*id), jsonQuote(lease))
	}
	*id = lease
	return nil
}

// decode reads a JSON body of at most maxBody bytes into msg, refusing
// unknown fields.
func (a *API) decode(w http.ResponseWriter, r *http.Request, msg proto.Message) error {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			return &apiError{http.StatusRequestEntityTooLarge, codeBodyTooLarge,
				"request body is larger than " + strconv.FormatInt(a.maxBody, 10) + " bytes"}
		case errors.Is(err, os.ErrDeadlineExceeded):
			return &apiError{http.StatusRequestTimeout, codeRequestTimeout, "the request body did not arrive within read_timeout"}
		}
		return badRequest("the request body could not be read: the connection failed before it was complete")
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return badRequest("request body is empty; want a JSON object")
	}
	return unmarshalBody(raw, msg)
}

// marshal writes proto messages as the API's JSON: field names as in the
// .proto files, every field present.
var marshal = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

func writeProto(w http.ResponseWriter, status int, m proto.Message) {
	rr, release := m.(*repoolv1.ReleaseResponse)
	if release && rr.GetNext() == nil || m.ProtoReflect().Descriptor().Fields().Len() == 0 {
		// A plain release answers {}, as it did before next existed, and
		// so does an answer without fields (a report's): the bytes, not
		// an encoder's reflection of an empty struct.
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		w.Write(emptyObject) // an error means the client went away
		return
	}
	var raw []byte
	var err error
	ok := false
	switch r := m.(type) { // the answers of nearly every call, without reflection
	case *repoolv1.AcquireResponse:
		raw, ok = appendLeaseAnswer(make([]byte, 0, 192), r.GetLease())
	case *repoolv1.RenewResponse:
		raw, ok = appendLeaseAnswer(make([]byte, 0, 192), r.GetLease())
	}
	if !ok {
		raw, err = marshal.Marshal(m)
	}
	if err != nil {
		writeAnswer(w, answer{status: http.StatusInternalServerError, code: codeInternal, msg: "encoding the answer: " + err.Error()})
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(raw, '\n')) // an error means the client went away
}

// emptyObject is the JSON answer {} with its newline, as writeJSON writes
// it.
var emptyObject = []byte("{}\n")

func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // an error means the client went away
}

// breakerView is one provider in GET /v1/breakers.
type breakerView struct {
	Provider       string       `json:"provider"`
	State          string       `json:"state"`
	Since          time.Time    `json:"since"`
	SecondsInState float64      `json:"seconds_in_state"`
	RetryAfterMS   int64        `json:"retry_after_ms,omitempty"`
	Counts         countsView   `json:"counts"`
	Trips          uint64       `json:"trips"`
	LastTrip       *tripView    `json:"last_trip,omitempty"`
	Bulkhead       bulkheadView `json:"bulkhead"`
}

// bulkheadView is a provider's bulkhead in GET /v1/breakers.
type bulkheadView struct {
	Limit        int     `json:"limit"`
	MinInFlight  int     `json:"min_in_flight"`
	MaxInFlight  int     `json:"max_in_flight"`
	InFlight     int     `json:"in_flight"`
	Waiting      int     `json:"waiting"`
	Slow         bool    `json:"slow"`
	LastAnswerMS float64 `json:"last_answer_ms"`
}

type countsView struct {
	Requests             uint32 `json:"requests"`
	Successes            uint32 `json:"successes"`
	Failures             uint32 `json:"failures"`
	Exclusions           uint32 `json:"exclusions"`
	ConsecutiveSuccesses uint32 `json:"consecutive_successes"`
	ConsecutiveFailures  uint32 `json:"consecutive_failures"`
}

type tripView struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

func (a *API) breakers(w http.ResponseWriter, _ *http.Request) {
	provs := a.providers.All()
	sort.Slice(provs, func(i, j int) bool { return provs[i].Name() < provs[j].Name() })
	views := make([]breakerView, 0, len(provs))
	now := time.Now()
	for _, p := range provs {
		s, bh, bp := p.Breaker().Status(), p.Bulkhead().Status(), p.Bulkhead().Policy()
		v := breakerView{
			Provider: s.Provider, State: s.State.String(), Since: s.Since.UTC(),
			SecondsInState: now.Sub(s.Since).Seconds(), RetryAfterMS: s.RetryAfter.Milliseconds(),
			Counts: countsView{
				Requests: s.Counts.Requests, Successes: s.Counts.Successes, Failures: s.Counts.Failures,
				Exclusions: s.Counts.Exclusions, ConsecutiveSuccesses: s.Counts.ConsecutiveSuccesses,
				ConsecutiveFailures: s.Counts.ConsecutiveFailures,
			},
			Trips: s.Trips,
			Bulkhead: bulkheadView{Limit: bh.Limit, MinInFlight: bp.MinInFlight, MaxInFlight: bp.MaxInFlight,
				InFlight: bh.InFlight, Waiting: bh.Waiting, Slow: bh.Slow,
				LastAnswerMS: float64(bh.LastAnswer.Microseconds()) / 1000},
		}
		if !s.LastTrip.IsZero() {
			v.LastTrip = &tripView{At: s.LastTrip.UTC(), Reason: s.LastTripReason}
		}
		views = append(views, v)
	}
	writeJSON(w, http.StatusOK, map[string]any{"breakers": views})
}

// readyTimeout bounds one provider's readiness check.
const readyTimeout = 2 * time.Second

// providerReadiness is one provider in GET /readyz.
type providerReadiness struct {
	Ready  bool   `json:"ready"`
	Reason string `json:"reason,omitempty"`
}

// readyz answers 200 when every provider (or the one ?provider= names) has
// a valid token and a serving upstream, else 503 with the reason per
// provider. The checks run at once, each within readyTimeout.
func (a *API) readyz(w http.ResponseWriter, r *http.Request) {
	names := a.providers.Names()
	for k, v := range r.URL.Query() {
		if k != "provider" || len(v) != 1 {
			writeAnswer(w, answer{status: http.StatusBadRequest, code: codeInvalidArgument,
				msg: "GET /readyz takes one optional query parameter, provider=<name>"})
			return
		}
		if !slices.Contains(names, v[0]) {
			writeAnswer(w, answer{status: http.StatusNotFound, code: codeUnknownProvider,
				msg: "no provider named " + jsonQuote(v[0]) + " in the sidecar's configuration"})
			return
		}
		names = []string{v[0]}
	}
	out := make(map[string]providerReadiness, len(names))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range names {
		h, ok := a.providers.Lookup(name)
		if !ok {
			out[name] = providerReadiness{Reason: "removed from the configuration while checked"}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer h.Release()
			ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
			defer cancel()
			pr := providerReadiness{Ready: true}
			if err := h.Provider.Ready(ctx); err != nil {
				pr = providerReadiness{Reason: err.Error()}
			}
			mu.Lock()
			out[name] = pr
			mu.Unlock()
		}()
	}
	wg.Wait()
	code, st := http.StatusOK, "ready"
	for _, pr := range out {
		if !pr.Ready {
			code, st = http.StatusServiceUnavailable, "not_ready"
		}
	}
	if len(names) == 0 {
		code, st = http.StatusServiceUnavailable, "not_ready"
	}
	writeJSON(w, code, map[string]any{"status": st, "providers": out})
}

func (a *API) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "providers": len(a.providers.All())})
}

// OpenAPI is the OpenAPI 3 document of this API, served at GET
// /openapi.json. The sidecar's tests validate every answer they observe
// against it, so it cannot drift from the code.
//
//go:embed openapi.json
var OpenAPI []byte

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	w.Write(OpenAPI) // an error means the client went away
}

// jsonQuote quotes s for a message, escaping what a JSON string would.
func jsonQuote(s string) string {
	raw, _ := json.Marshal(s) // a string always encodes
	return string(raw)
}
