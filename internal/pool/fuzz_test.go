package pool

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// validName and validValue are the documented rules for ids, contexts and
// label keys, and for label values.
func validName(s string) bool { return s != "" && validValue(s) }

func validValue(s string) bool {
	return len(s) <= MaxIDLen && utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// FuzzRequests feeds arbitrary ids, contexts, capacities, TTLs, latencies
// and outcomes to the pool: every call either succeeds or fails with ErrInvalidArgument
// exactly when the input breaks a documented rule, and a rejected call leaves
// the pool as it was.
func FuzzRequests(f *testing.F) {
	f.Add("proxy-1", "search", 1, int64(time.Minute), uint8(1), "k", "v")
	f.Add("", "", 0, int64(0), uint8(0), "", "")
	f.Add(strings.Repeat("a", 257), "c", -1, int64(time.Hour)+1, uint8(4), "k", "\xff")
	f.Add("\xff\xfe", "ctx", 3, int64(time.Second), uint8(3), "region", "eu")
	f.Add("a\x00", "c\x00", 1, int64(time.Minute), uint8(1), "k\x00", "v")
	f.Add("a", "c", 1, int64(time.Minute), uint8(1), "k", "v\x00")
	f.Fuzz(func(t *testing.T, id, ctx string, capacity int, ttl int64, outcome uint8, lk, lv string) {
		p, _ := newTestPool(t, Config{})
		register(t, p, Spec{ID: "existing", Capacity: 2})
		before := fingerprint(t, p)
		check := func(call string, err error, valid bool) {
			t.Helper()
			switch {
			case valid && errors.Is(err, ErrInvalidArgument):
				t.Fatalf("%s rejected valid input: %v", call, err)
			case !valid && !errors.Is(err, ErrInvalidArgument):
				t.Fatalf("%s = %v, want ErrInvalidArgument", call, err)
			case !valid:
				if after := fingerprint(t, p); after != before {
					t.Fatalf("%s changed state although rejected", call)
				}
			}
			before = fingerprint(t, p)
		}

		labels := map[string]string{lk: lv}
		labelsOK := validName(lk) && validValue(lv)
		_, _, err := p.Register([]Spec{{ID: id, Capacity: capacity, Labels: labels}})
		check("Register", err, validName(id) && capacity >= 0 && capacity <= 1<<20 && labelsOK)

		d := time.Duration(ttl)
		_, err = p.Acquire(ctx, d, nil)
		if errors.Is(err, ErrExhausted) {
			err = nil
		}
		check("Acquire", err, validName(ctx) && d >= MinTTL && d <= MaxTTL)

		_, err = p.Report(Report{Resource: "existing", Context: ctx, Outcome: Outcome(outcome)})
		check("Report", err, validName(ctx) && outcome >= 1 && outcome <= 3)

		// The TTL's value doubles as a latency.
		_, err = p.Report(Report{Resource: "existing", Context: "c", Outcome: Success, Latency: d})
		check("Report(latency)", err, d >= 0 && d <= MaxLatency)

		_, err = p.Report(Report{Resource: id, Context: "c", Outcome: Success})
		if errors.Is(err, ErrNotFound) {
			err = nil
		}
		check("Report(id)", err, validName(id))

		_, _, err = p.Deregister([]string{id})
		check("Deregister", err, validName(id))
		if err := p.checkInvariants(); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzLeaseCalls feeds arbitrary lease ids, tokens, TTLs and outcomes to
// Renew, Release and Report on a pool with one live lease: each
// call answers exactly the documented error, and a rejected call changes
// nothing — no state, counter, checkpoint change or event.
func FuzzLeaseCalls(f *testing.F) {
	f.Add(uint8(0), uint64(1), uint64(1), int64(time.Minute), uint8(1))
	f.Add(uint8(1), uint64(0), uint64(1), int64(time.Minute), uint8(0))
	f.Add(uint8(2), uint64(0), uint64(0), int64(0), uint8(2))
	f.Add(uint8(2), uint64(0), uint64(7), int64(time.Minute), uint8(1))
	f.Add(uint8(2), uint64(1), uint64(0), int64(time.Minute), uint8(1))
	f.Add(uint8(0), uint64(1), uint64(2), int64(time.Hour)+1, uint8(9))
	f.Fuzz(func(t *testing.T, op uint8, id, token uint64, ttl int64, outcome uint8) {
		p, _ := newTestPool(t, Config{})
		register(t, p, Spec{ID: "r", Capacity: 2})
		l := mustAcquire(t, p, "ctx")
		before := fingerprint(t, p)
		sub := p.Subscribe(0, 0)
		defer sub.Close()

		o := Outcome(outcome)
		validOutcome := o >= Success && o <= Blocked
		var want error // nil: the call succeeds
		lease := func() {
			switch {
			case id != l.ID:
				want = ErrNotFound
			case token != l.Token:
				want = ErrStaleToken
			}
		}
		var err error
		switch op % 3 {
		case 0:
			if d := time.Duration(ttl); d < MinTTL || d > MaxTTL {
				want = ErrInvalidArgument
			} else {
				lease()
			}
			_, err = p.Renew(id, token, time.Duration(ttl))
		case 1:
			if o != 0 && !validOutcome {
				want = ErrInvalidArgument
			} else {
				lease()
			}
			_, err = p.Release(id, token, o)
		case 2:
			switch {
			case !validOutcome || (id == 0) != (token == 0):
				want = ErrInvalidArgument
			case id != 0:
				lease()
			}
			_, err = p.Report(Report{Resource: "r", Context: "ctx", Outcome: o, LeaseID: id, Token: token})
		}
		if (want == nil) != (err == nil) || (want != nil && !errors.Is(err, want)) {
			t.Fatalf("op %d (id %d, token %d, ttl %d, outcome %d) = %v, want %v", op%3, id, token, ttl, outcome, err, want)
		}
		if err != nil {
			if ch := p.TakeChanges(); len(ch.Resources)+len(ch.Cells)+len(ch.Removed) > 0 {
				t.Fatalf("rejected op %d left changes: %+v", op%3, ch)
			}
			select {
			case e := <-sub.C:
				t.Fatalf("rejected op %d emitted %+v", op%3, e)
			default:
			}
			if after := fingerprint(t, p); after != before {
				t.Fatalf("rejected op %d changed state:\nbefore %s\nafter  %s", op%3, before, after)
			}
		}
		if err := p.checkInvariants(); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzPlainASCII checks the word-at-a-time ASCII check against a byte loop.
func FuzzPlainASCII(f *testing.F) {
	f.Add("proxy-000123")
	f.Add("")
	f.Add("abcdefgh\x00")
	f.Add("\x00abcdefghijklmno")
	f.Add("abcdefg\x80ijklmnop")
	f.Add("abcdefghijklmno\x7f")
	f.Add("abcdefgh\x01\xff")
	f.Fuzz(func(t *testing.T, s string) {
		want := true
		for i := 0; i < len(s); i++ {
			if s[i] == 0 || s[i] >= 0x80 {
				want = false
			}
		}
		if got := plainASCII(s); got != want {
			t.Fatalf("plainASCII(%q) = %v, want %v", s, got, want)
		}
	})
}
