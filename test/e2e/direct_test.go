package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
)

// direct is a gRPC client straight to one server, bypassing HAProxy, with
// a bearer token: what a client that cached a server's address would do.
type direct struct {
	server *server
	pool   repoolv1.PoolServiceClient
	ctx    context.Context // carries the bearer token
}

// dial connects to s and obtains a token, so that later calls need
// nothing from s but to read them.
func (c *cluster) dial(tb testing.TB, s *server) *direct {
	tb.Helper()
	conn, err := grpc.NewClient(fmt.Sprintf("%s:%d", s.host.addr, grpcPort), grpc.WithTransportCredentials(c.creds()))
	if err != nil {
		tb.Fatalf("grpc.NewClient(%s) = got error %v, want nil", s.host.name, err)
	}
	tb.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", c.apiKey), 5*time.Second)
	defer cancel()
	tok, err := repoolv1.NewAuthServiceClient(conn).IssueToken(ctx, &repoolv1.IssueTokenRequest{})
	if err != nil {
		tb.Fatalf("IssueToken at %s = got error %v, want nil", s.host.name, err)
	}
	return &direct{
		server: s,
		pool:   repoolv1.NewPoolServiceClient(conn),
		ctx:    metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok.GetToken()),
	}
}

// Requests queue sends while the server is stopped.
const (
	queuedAcquires  = 64
	queuedRegisters = 16
	queuedDeadline  = 15 * time.Second
)

// queue sends acquires and registrations to the (stopped) server, each in
// its own goroutine. Answers that acknowledge something go into b's ledger
// like any other client's. The returned function waits for every answer
// and summarizes them.
func (d *direct) queue(b *backend) func() string {
	var mu sync.Mutex
	answers := map[string]int{}
	note := func(op string, err error) {
		key := op + " OK"
		if err != nil {
			st := status.Convert(err)
			key = fmt.Sprintf("%s %s %q", op, st.Code(), st.Message())
		}
		mu.Lock()
		answers[key]++
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for range queuedAcquires {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(d.ctx, queuedDeadline)
			defer cancel()
			resp, err := d.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: workContext, TtlSeconds: leaseTTL})
			note("acquire", err)
			if err == nil {
				l := resp.GetLease()
				b.mu.Lock()
				b.leases = append(b.leases, &lease{id: l.GetLeaseId(), resource: l.GetResourceId(), token: l.GetFencingToken(),
					acked: time.Now(), expires: l.GetExpiresAt().AsTime()})
				b.mu.Unlock()
			}
		})
	}
	for i := range queuedRegisters {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(d.ctx, queuedDeadline)
			defer cancel()
			id := fmt.Sprintf("stale-%s-%d", d.server.host.name, i)
			_, err := d.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: id, Capacity: 1}}})
			note("register", err)
			if err == nil {
				b.mu.Lock()
				b.registered[id] = true
				b.mu.Unlock()
			}
		})
	}
	return func() string {
		wg.Wait()
		keys := slices.Sorted(maps.Keys(answers))
		var s strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&s, "%s ×%d; ", k, answers[k])
		}
		return s.String()
	}
}
