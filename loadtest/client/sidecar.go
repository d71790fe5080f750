package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/repool/repool/internal/sidecar/httpapi"
)

// Sidecar calls the sidecar's HTTP API, as the k6 script does.
type Sidecar struct {
	base   string
	client *http.Client
}

// NewSidecar returns a client of the sidecar at base
// (http://127.0.0.1:7070). timeout bounds one call; conns is how many
// keep-alive connections to keep (the VUs that may run at once).
func NewSidecar(base string, timeout time.Duration, conns int) *Sidecar {
	return &Sidecar{base: base, client: &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute,
			DisableCompression: true, ResponseHeaderTimeout: timeout,
		},
	}}
}

// leaseJSON is a lease in the sidecar's answers.
type leaseJSON struct {
	LeaseID      string          `json:"lease_id"`
	ResourceID   string          `json:"resource_id"`
	FencingToken json.RawMessage `json:"fencing_token"`
}

// lease keeps the fencing token exact: the sidecar writes it as a string
// (a uint64 does not fit a JSON number of every reader).
func (j leaseJSON) lease() Lease {
	tok := string(j.FencingToken)
	if u, err := strconv.Unquote(tok); err == nil {
		tok = u
	}
	return Lease{ID: j.LeaseID, Resource: j.ResourceID, FencingToken: tok}
}

// Acquire calls POST /v1/providers/{p}/acquire.
func (s *Sidecar) Acquire(ctx context.Context, provider, workContext string, ttlSeconds int) (Lease, Result) {
	var out struct {
		Lease leaseJSON `json:"lease"`
	}
	r := s.post(ctx, "/v1/providers/"+url.PathEscape(provider)+"/acquire",
		map[string]any{"context": workContext, "ttl_seconds": ttlSeconds}, &out)
	if r.Failed() {
		return Lease{}, r
	}
	return out.Lease.lease(), r
}

// Report calls POST /v1/providers/{p}/reports for the lease.
func (s *Sidecar) Report(ctx context.Context, provider string, l Lease, workContext, outcome string) Result {
	return s.post(ctx, "/v1/providers/"+url.PathEscape(provider)+"/reports", map[string]any{
		"resource_id": l.Resource, "context": workContext, "outcome": outcome,
		"lease_id": l.ID, "fencing_token": l.FencingToken,
	}, nil)
}

// Release calls POST /v1/providers/{p}/leases/{lease}/release.
func (s *Sidecar) Release(ctx context.Context, provider string, l Lease) Result {
	return s.post(ctx, "/v1/providers/"+url.PathEscape(provider)+"/leases/"+url.PathEscape(l.ID)+"/release",
		map[string]any{"fencing_token": l.FencingToken}, nil)
}

// ReleaseNext calls POST /v1/providers/{p}/leases/{lease}/release with
// the outcome of the use and a next lease for workContext, in one round
// trip. ok is false when the release succeeded but no next lease came
// (the answer's next.error, e.g. no_resource_available), and when the
// call failed (r.Failed()).
func (s *Sidecar) ReleaseNext(ctx context.Context, provider string, l Lease, outcome, workContext string, ttlSeconds int) (next Lease, ok bool, r Result) {
	var out struct {
		Next struct {
			Lease *leaseJSON `json:"lease"`
		} `json:"next"`
	}
	r = s.post(ctx, "/v1/providers/"+url.PathEscape(provider)+"/leases/"+url.PathEscape(l.ID)+"/release", map[string]any{
		"fencing_token": l.FencingToken, "outcome": outcome,
		"next": map[string]any{"context": workContext, "ttl_seconds": ttlSeconds},
	}, &out)
	if r.Failed() || out.Next.Lease == nil {
		return Lease{}, false, r
	}
	return out.Next.Lease.lease(), true, r
}

// Close closes idle connections.
func (s *Sidecar) Close() error {
	s.client.CloseIdleConnections()
	return nil
}

func (s *Sidecar) post(ctx context.Context, path string, body, out any) Result {
	raw, err := json.Marshal(body)
	if err != nil {
		return Result{Code: "client_error"}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+path, bytes.NewReader(raw))
	if err != nil {
		return Result{Code: "client_error"}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		code := "transport_error"
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			code = "request_timeout"
		}
		return Result{Code: code}
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	r := Result{Status: resp.StatusCode, FastFail: resp.Header.Get(httpapi.FastFailHeader)}
	if err != nil {
		return Result{Code: "transport_error", FastFail: r.FastFail}
	}
	if r.Failed() {
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(answer, &e) == nil && e.Error.Code != "" {
			r.Code = e.Error.Code
		} else {
			r.Code = "http_" + strconv.Itoa(resp.StatusCode)
		}
		return r
	}
	if out != nil {
		if err := json.Unmarshal(answer, out); err != nil {
			return Result{Status: 0, Code: "bad_answer"}
		}
	}
	return r
}
