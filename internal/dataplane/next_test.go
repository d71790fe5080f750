package dataplane

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
)

// errorInfo returns the repool ErrorInfo detail of a status error, or nil.
func errorInfo(err error) *errdetails.ErrorInfo {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == repoolv1.ErrorDomain {
			return info
		}
	}
	return nil
}

// TestReleaseWithNext: one call releases a lease and answers the next one;
// when none is free the release stands and the answer says why; a bad next
// field refuses the whole call and releases nothing.
func TestReleaseWithNext(t *testing.T) {
	e := newEnv(t)
	a := as("key-a")
	if _, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r1"}}}); err != nil {
		t.Fatal(err)
	}
	acq, err := e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	l := acq.GetLease()
	next := &repoolv1.NextLease{Context: "x", TtlSeconds: 60}

	_, err = e.client.Release(a, &repoolv1.ReleaseRequest{LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken(), Next: &repoolv1.NextLease{Context: "x"}})
	wantCode(t, "Release(next without ttl_seconds)", err, codes.InvalidArgument)
	p, _ := e.pools.Pool("a")
	if p.ActiveLeases() != 1 {
		t.Fatal("a refused Release with next released the lease")
	}

	resp, err := e.client.Release(a, &repoolv1.ReleaseRequest{LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken(), Outcome: repoolv1.Outcome_SUCCESS, Next: next})
	if err != nil {
		t.Fatal(err)
	}
	l2 := resp.GetNext().GetLease()
	if l2 == nil || l2.GetResourceId() != "r1" || l2.GetFencingToken() <= l.GetFencingToken() {
		t.Fatalf("Release with next = %v, want a new lease of r1", resp)
	}

	// r1 is the only resource and is held by l2: releasing a lease that no
	// longer exists is an error; releasing l2 and asking for a next one in
	// a context with labels nothing carries answers why.
	resp, err = e.client.Release(a, &repoolv1.ReleaseRequest{LeaseId: l2.GetLeaseId(), FencingToken: l2.GetFencingToken(),
		Next: &repoolv1.NextLease{Context: "x", TtlSeconds: 60, Labels: map[string]string{"tier": "gold"}}})
	if err != nil {
		t.Fatal(err)
	}
	pr := resp.GetNext().GetError()
	if pr.GetCode() != "no_resource_available" || pr.GetWhy() != "none_match" || pr.GetMessage() == "" {
		t.Fatalf("next error = %v, want no_resource_available / none_match", pr)
	}
	if p.ActiveLeases() != 0 {
		t.Fatalf("%d leases held, want the release done although no next was free", p.ActiveLeases())
	}
	// A plain Release answers no next.
	acq, _ = e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	resp, err = e.client.Release(a, &repoolv1.ReleaseRequest{LeaseId: acq.GetLease().GetLeaseId(), FencingToken: acq.GetLease().GetFencingToken()})
	if err != nil || resp.GetNext() != nil {
		t.Fatalf("plain Release = %v, %v; want no next", resp, err)
	}
}

// TestExhaustedKindsAreToldApart: RESOURCE_EXHAUSTED carries an ErrorInfo
// whose reason tells a pool with nothing free from a rate limit, with
// why and the retry-after.
func TestExhaustedKindsAreToldApart(t *testing.T) {
	e := newEnv(t)
	a := as("key-a")
	_, err := e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	wantCode(t, "Acquire(empty pool)", err, codes.ResourceExhausted)
	if info := errorInfo(err); info == nil || info.GetReason() != repoolv1.ReasonNoResourceAvailable || info.GetMetadata()["why"] != "none_registered" {
		t.Fatalf("empty pool: detail %v of %v", info, err)
	}
	e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r1"}}})
	e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	_, err = e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	info := errorInfo(err)
	if info == nil || info.GetMetadata()["why"] != "all_leased" || info.GetMetadata()["frees_at"] == "" {
		t.Fatalf("all leased: detail %v of %v", info, err)
	}
	e.limiter.deny["a"] = true
	_, err = e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	if info := errorInfo(err); info == nil || info.GetReason() != repoolv1.ReasonRateLimited || info.GetMetadata()["retry_after_ms"] != "1500" {
		t.Fatalf("rate limited: detail %v of %v", info, err)
	}
	if problem(context.Background(), e.svc.log, errors.New("x")).GetCode() != "internal" {
		t.Fatal("an unknown error's problem code is not internal")
	}
}

// TestReleaseNextErrorsNameNextsFields: a bad field of next is named as
// next's, so the caller knows the release was not the problem.
func TestReleaseNextErrorsNameNextsFields(t *testing.T) {
	e := newEnv(t)
	a := as("key-a")
	e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r1"}}})
	acq, err := e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	l := acq.GetLease()
	for _, tt := range []struct {
		next *repoolv1.NextLease
		want string
	}{
		{&repoolv1.NextLease{Context: "x"}, "next.ttl_seconds is required"},
		{&repoolv1.NextLease{Context: "x", TtlSeconds: 7200}, "next.ttl_seconds 7200 is outside [1, 3600]"},
		{&repoolv1.NextLease{TtlSeconds: 60}, "next.context"},
	} {
		_, err := e.client.Release(a, &repoolv1.ReleaseRequest{LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken(), Next: tt.next})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tt.want) {
			t.Errorf("Release(next %v) = %v, want INVALID_ARGUMENT naming %q", tt.next, err, tt.want)
		}
	}
}
