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

// FuzzRequests feeds arbitrary ids, contexts, capacities, TTLs and outcomes
// to the pool: every call either succeeds or fails with ErrInvalidArgument
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
