package httpapi

import (
	"strconv"
	"time"

	repoolv1 "github.com/repool/repool/api/repool/v1"
)

// appendLeaseAnswer appends the JSON of an answer that holds one lease
// (AcquireResponse, RenewResponse: {"lease":{…}}), as marshal writes it
// (proto names, every field, fields in number order, uint64 as a string,
// the expiry as RFC 3339 with 0, 3, 6 or 9 fractional digits), without
// protojson's reflection: the answers of nearly every call. It returns
// false, and appends nothing, for what it does not write as marshal would
// (a string that needs escaping, an expiry out of range): the caller then
// uses marshal. TestLeaseJSONAsProtojson holds the two to the same JSON.
func appendLeaseAnswer(b []byte, l *repoolv1.Lease) ([]byte, bool) {
	if l == nil {
		return append(b, `{"lease":null}`...), true
	}
	if !plain(l.GetLeaseId()) || !plain(l.GetResourceId()) || !plain(l.GetContext()) {
		return b, false
	}
	n := len(b)
	b = append(b, `{"lease":{"lease_id":"`...)
	b = append(b, l.GetLeaseId()...)
	b = append(b, `","resource_id":"`...)
	b = append(b, l.GetResourceId()...)
	b = append(b, `","context":"`...)
	b = append(b, l.GetContext()...)
	b = append(b, `","fencing_token":"`...)
	b = strconv.AppendUint(b, l.GetFencingToken(), 10)
	b = append(b, `","expires_at":`...)
	if ts := l.GetExpiresAt(); ts == nil {
		b = append(b, "null"...)
	} else {
		// protojson's range: years 1 to 9999, nanos within a second.
		if ts.GetSeconds() < -62135596800 || ts.GetSeconds() > 253402300799 || ts.GetNanos() < 0 || ts.GetNanos() >= 1e9 {
			return b[:n], false
		}
		b = append(b, '"')
		t := time.Unix(ts.GetSeconds(), int64(ts.GetNanos())).UTC()
		b = t.AppendFormat(b, "2006-01-02T15:04:05")
		if ns := ts.GetNanos(); ns != 0 {
			digits, v := 9, int(ns)
			switch {
			case v%1e6 == 0:
				digits, v = 3, v/1e6
			case v%1e3 == 0:
				digits, v = 6, v/1e3
			}
			b = append(b, '.')
			s := strconv.Itoa(v)
			for range digits - len(s) {
				b = append(b, '0')
			}
			b = append(b, s...)
		}
		b = append(b, `Z"`...)
	}
	b = append(b, `,"rebound":`...)
	b = strconv.AppendBool(b, l.GetRebound())
	return append(b, "}}"...), true
}

// plain tells a string that JSON writes as it is: printable ASCII without
// '"' and '\'.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
