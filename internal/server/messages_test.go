package server

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
)

// TestUnknownOutcomeIsNamedAsSent: an outcome the enum does not define is
// refused naming the value the client sent (7), not the value the server
// turned it into — on Report, Release and a Release with next, the lease
// staying held.
func TestUnknownOutcomeIsNamedAsSent(t *testing.T) {
	r := start(t, Config{Store: sqliteStore(t)})
	ctx := withKey(r.key)
	if _, err := r.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r1"}}}); err != nil {
		t.Fatal(err)
	}
	a, err := r.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "c", TtlSeconds: 30})
	if err != nil {
		t.Fatal(err)
	}
	l := a.GetLease()
	const want = "invalid argument: outcome 7 is not SUCCESS, FAILURE or BLOCKED"
	for name, call := range map[string]func() error{
		"Report": func() error {
			_, err := r.pool.Report(ctx, &repoolv1.ReportRequest{ResourceId: "r1", Context: "c", Outcome: repoolv1.Outcome(7)})
			return err
		},
		"Release": func() error {
			_, err := r.pool.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken(), Outcome: repoolv1.Outcome(7)})
			return err
		},
		"Release with next": func() error {
			_, err := r.pool.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken(), Outcome: repoolv1.Outcome(7),
				Next: &repoolv1.NextLease{Context: "c", TtlSeconds: 30}})
			return err
		},
	} {
		if st := status.Convert(call()); st.Code() != codes.InvalidArgument || st.Message() != want {
			t.Errorf("%s with outcome 7 = %v %q, want INVALID_ARGUMENT %q", name, st.Code(), st.Message(), want)
		}
	}
	// Refused before anything changed: the lease is still held.
	if _, err := r.pool.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken(), Outcome: repoolv1.Outcome_SUCCESS}); err != nil {
		t.Errorf("Release of the lease after the refusals = %v, want it released now", err)
	}
}

// TestNegativeZeroRateIsZero: a limit of -0 (valid JSON, and within the
// range) is answered, stored and audited as 0, never "-0".
func TestNegativeZeroRateIsZero(t *testing.T) {
	r := start(t, Config{Store: sqliteStore(t)})
	raw := func(method, path, body string) string {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+r.s.HTTPAddr()+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+r.op)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
			t.Fatalf("%s %s = %d %s", method, path, resp.StatusCode, b)
		}
		return string(b)
	}
	raw("POST", "/api/v1/tenants", `{"id":"acme","name":"Acme"}`)
	put := raw("PUT", "/api/v1/tenants/acme/limits", `{"rate_per_second":-0,"tenant_admin":{"rate_per_second":-0.0}}`)
	get := raw("GET", "/api/v1/tenants/acme/limits", "")
	audit := raw("GET", "/api/v1/tenants/acme/audit", "")
	for what, body := range map[string]string{"PUT answer": put, "GET answer": get} {
		if strings.Contains(body, ":-0") || !strings.Contains(body, `"rate_per_second":0,`) {
			t.Errorf("%s = %s, want rate_per_second 0, no -0", what, body)
		}
	}
	if !strings.Contains(audit, `rate_per_second default -> 0`) || !strings.Contains(audit, `tenant_admin.rate_per_second none -> 0`) || strings.Contains(audit, "-> -0") {
		t.Errorf("audit = %s, want the rates shown as 0, no -0", audit)
	}
}
