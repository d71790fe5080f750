package token

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	repoolv1 "github.com/repool/repool/api/repool/v1"
)

// countingIssuer issues a new token on every call, at once, and counts the
// calls.
type countingIssuer struct{ calls atomic.Int64 }

func (c *countingIssuer) IssueToken(context.Context, *repoolv1.IssueTokenRequest, ...grpc.CallOption) (*repoolv1.IssueTokenResponse, error) {
	n := c.calls.Add(1)
	return &repoolv1.IssueTokenResponse{Token: "t" + strconv.FormatInt(n, 10), ExpiresAt: timestamppb.New(time.Now().Add(time.Hour))}, nil
}

// TestSingleFlightUnderStress: callers that find no token while a flight
// finishes must take the token it fetched, not start another. With an
// issuer that answers at once, flights end while callers are still between
// their cache check and joining the flight; every round of concurrent
// misses must still issue exactly one token, and count one refresh.
func TestSingleFlightUnderStress(t *testing.T) {
	iss := &countingIssuer{}
	m := NewMetrics(nil)
	s := newSource(t, Config{Issuer: iss, Metrics: m})
	const rounds, callers = 200, 200
	for round := 1; round <= rounds; round++ {
		var (
			wg     sync.WaitGroup
			start  = make(chan struct{})
			failed atomic.Int64
			held   atomic.Pointer[Token]
		)
		for range callers {
			wg.Go(func() {
				<-start
				tok, err := s.Token(context.Background())
				if err != nil {
					failed.Add(1)
					return
				}
				held.Store(tok)
			})
		}
		close(start)
		wg.Wait()
		if got := iss.calls.Load(); got != int64(round) || failed.Load() != 0 {
			t.Fatalf("round %d: %d concurrent Token() calls with no token held = %d IssueToken calls in all and %d failures, want %d and 0",
				round, callers, got, failed.Load(), round)
		}
		s.Invalidate(context.Background(), held.Load())
	}
	if got := testutil.ToFloat64(m.refreshes.WithLabelValues("p", reasonMiss)); got != rounds {
		t.Fatalf("repool_sidecar_token_refreshes_total{reason=miss} = got %v, want %d (one per flight)", got, rounds)
	}
}
