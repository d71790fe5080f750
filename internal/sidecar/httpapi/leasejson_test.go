package httpapi

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	repoolv1 "github.com/repool/repool/api/repool/v1"
)

// TestLeaseJSONAsProtojson: appendLeaseAnswer writes the same JSON as
// marshal, or declines; it declines only strings that need escaping and
// expiries out of protojson's range.
func TestLeaseJSONAsProtojson(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	str := func() string {
		const chars = "abcXYZ019-_.:/ ~!é\"\\\n\t\x00<>&\u2028"
		r := []rune(chars)
		n := rng.IntN(12)
		out := make([]rune, n)
		for i := range out {
			if rng.IntN(4) == 0 {
				out[i] = r[rng.IntN(len(r))]
			} else {
				out[i] = r[rng.IntN(15)]
			}
		}
		return string(out)
	}
	leases := []*repoolv1.Lease{nil, {}, {ExpiresAt: &timestamppb.Timestamp{Seconds: 253402300800}}, {ExpiresAt: &timestamppb.Timestamp{Nanos: -1}}}
	for range 5000 {
		l := &repoolv1.Lease{LeaseId: str(), ResourceId: str(), Context: str(), FencingToken: rng.Uint64() >> rng.IntN(64), Rebound: rng.IntN(2) == 0}
		switch rng.IntN(5) {
		case 0:
		case 1:
			l.ExpiresAt = timestamppb.New(time.Unix(rng.Int64N(1e10), 0))
		case 2:
			l.ExpiresAt = timestamppb.New(time.Unix(rng.Int64N(1e10), int64(rng.IntN(1000))*1e6))
		case 3:
			l.ExpiresAt = timestamppb.New(time.Unix(rng.Int64N(1e10), int64(rng.IntN(1e6))*1e3))
		default:
			l.ExpiresAt = timestamppb.New(time.Unix(rng.Int64N(1e10)-5e9, rng.Int64N(1e9)))
		}
		leases = append(leases, l)
	}
	declined := 0
	for _, l := range leases {
		got, ok := appendLeaseAnswer([]byte("x"), l)
		if !ok {
			if string(got) != "x" {
				t.Fatalf("appendLeaseAnswer(%v) declined but appended %q", l, got)
			}
			declined++
			continue
		}
		want, err := marshal.Marshal(&repoolv1.AcquireResponse{Lease: l})
		if err != nil {
			t.Fatalf("marshal(%v) = %v, but appendLeaseAnswer wrote %s", l, err, got)
		}
		var g, w any
		if err := json.Unmarshal(got[1:], &g); err != nil {
			t.Fatalf("appendLeaseAnswer(%v) = %s, not JSON: %v", l, got[1:], err)
		}
		json.Unmarshal(want, &w)
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("appendLeaseAnswer(%v) = %s, marshal = %s", l, got[1:], want)
		}
	}
	if declined == 0 || declined > len(leases)*3/4 {
		t.Errorf("declined %d of %d leases; want some (strings to escape) and not most", declined, len(leases))
	}
}
