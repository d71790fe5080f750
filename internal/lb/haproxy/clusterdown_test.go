package haproxy_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/lb/haproxy/haproxytest"
	"github.com/repool/repool/internal/lb/inventory"
	"github.com/repool/repool/internal/sidecar/resilience"
)

// callErr makes one gRPC call through HAProxy's gRPC frontend and returns
// its error and how long it took.
func callErr(t *testing.T, inv *inventory.Inventory) (error, time.Duration) {
	t.Helper()
	target := net.JoinHostPort(inv.VIP.IP().String(), strconv.Itoa(inv.VIP.GRPCPort))
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	began := time.Now()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err, time.Since(began)
}

// TestClusterDownAnswer runs the rendered configuration on the real
// HAProxy, and reads its answers as the sidecar does: with a standby alive
// and no active server (a handover) a call gets HAProxy's usual refusal,
// which the sidecar retries; with every server DOWN it gets the
// cluster-down answer (UNAVAILABLE, our text in the message), which the
// sidecar does not; a standby coming back ends it.
func TestClusterDownAnswer(t *testing.T) {
	trio := haproxytest.StartTrio(t)
	rt := trio.Runtime
	haproxytest.WaitStatus(t, rt, map[string]string{"active": "UP", "standby": "NOLB", "broken": "DOWN"})
	if by := haproxytest.Call(t, trio.Inv, ""); by != "active" {
		t.Fatalf("call answered by %q, want active", by)
	}

	// A handover: the active server gone, the standby not active yet.
	trio.Active.Stop()
	haproxytest.WaitStatus(t, rt, map[string]string{"active": "DOWN", "standby": "NOLB"})
	err, _ := callErr(t, trio.Inv)
	if !resilience.Retryable(err) || !resilience.Handover(err) || resilience.ClusterDown(err) {
		t.Fatalf("call during a handover (a standby alive) = %v, want UNAVAILABLE that is retried as a handover, not cluster down", err)
	}

	// Every server DOWN.
	trio.Standby.Stop()
	haproxytest.WaitStatus(t, rt, map[string]string{"active": "DOWN", "standby": "DOWN", "broken": "DOWN"})
	err, took := callErr(t, trio.Inv)
	if !resilience.ClusterDown(err) || resilience.Retryable(err) || resilience.Handover(err) || status.Code(err) != codes.Unavailable {
		t.Fatalf("call with every server DOWN = %v, want UNAVAILABLE with %q, not retried", err, repoolv1.ClusterDownText)
	}
	t.Logf("cluster-down answer in %v (connection included)", took)

	// The standby is back: alive again, so not cluster down.
	trio.Standby.Start(t)
	haproxytest.WaitStatus(t, rt, map[string]string{"standby": "NOLB"})
	if err, _ := callErr(t, trio.Inv); resilience.ClusterDown(err) {
		t.Fatalf("call with a standby alive again = %v, want no cluster-down answer", err)
	}
}
