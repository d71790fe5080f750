package httpapi

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/google/go-cmp/cmp"

	repoolv1 "github.com/repool/repool/api/repool/v1"
)

// flatMessages are the requests whose bodies decodeFlat is for, and one it
// must leave to the checked path (a register: a list of objects).
func flatMessages() []proto.Message {
	return []proto.Message{
		&repoolv1.AcquireRequest{}, &repoolv1.ReleaseRequest{}, &repoolv1.ReportRequest{},
		&repoolv1.RenewRequest{}, &repoolv1.RegisterRequest{},
	}
}

// TestDecodeFlatTakesTheCommonBodies: the bodies the documented clients send
// for the calls of every lease are decoded by decodeFlat, into what the
// checked path gives; what it does not take is left to that path whole.
func TestDecodeFlatTakesTheCommonBodies(t *testing.T) {
	for _, tc := range []struct {
		msg  proto.Message
		body string
		flat bool
	}{
		{&repoolv1.AcquireRequest{}, `{"context":"product-list","ttl_seconds":30}`, true},
		{&repoolv1.AcquireRequest{}, "{ \"ttlSeconds\" : 30 ,\n \"context\":\"é\" }\n", true},
		{&repoolv1.AcquireRequest{}, `{}`, true},
		{&repoolv1.ReleaseRequest{}, `{"fencing_token":"1099511627777","outcome":"SUCCESS","latency_ms":12}`, true},
		{&repoolv1.ReleaseRequest{}, `{"fencing_token":1099511627777,"outcome":"FAILURE"}`, true},
		{&repoolv1.ReportRequest{}, `{"resource_id":"proxy-1","context":"c","outcome":"FAILURE","lease_id":"7","fencing_token":"7"}`, true},
		{&repoolv1.RenewRequest{}, `{"fencing_token":"7","ttl_seconds":30}`, true},
		// Left to the checked path, which takes them:
		{&repoolv1.AcquireRequest{}, `{"context":"a\"b"}`, false},                 // an escape
		{&repoolv1.AcquireRequest{}, `{"context":"c","exclude":["a"]}`, false},    // a list
		{&repoolv1.AcquireRequest{}, `{"context":"c","labels":{"k":"v"}}`, false}, // a map
		{&repoolv1.ReleaseRequest{}, `{"outcome":2}`, false},                      // an enum by number
		{&repoolv1.ReleaseRequest{}, `{"next":{"context":"c"}}`, false},           // a message
		{&repoolv1.AcquireRequest{}, `{"context":null}`, false},                   // null
		{&repoolv1.RegisterRequest{}, `{"resources":[{"id":"r","capacity":2}]}`, false},
		// Left to it, which refuses them:
		{&repoolv1.AcquireRequest{}, `{"ttl_seconds":"30"}`, false},
		{&repoolv1.AcquireRequest{}, `{"ttl_seconds":2147483648}`, false},
		{&repoolv1.AcquireRequest{}, `{"ttl_seconds":1.5}`, false},
		{&repoolv1.AcquireRequest{}, `{"ttl_seconds":01}`, false},
		{&repoolv1.AcquireRequest{}, `{"context":"a","context":"b"}`, false},
		{&repoolv1.AcquireRequest{}, `{"context":"a","ttlSeconds":1,"ttl_seconds":1}`, false},
		{&repoolv1.AcquireRequest{}, `{"context":"a",}`, false},
		{&repoolv1.AcquireRequest{}, `{"context":"a"} {}`, false},
		{&repoolv1.AcquireRequest{}, `{"nope":"a"}`, false},
		{&repoolv1.ReleaseRequest{}, `{"outcome":"MAYBE"}`, false},
		{&repoolv1.ReleaseRequest{}, `{"fencing_token":"-1"}`, false},
		{&repoolv1.AcquireRequest{}, "{\"context\":\"\xff\"}", false},
	} {
		flat := tc.msg.ProtoReflect().New().Interface()
		if got := decodeFlat([]byte(tc.body), flat); got != tc.flat {
			t.Errorf("decodeFlat(%s) into %T = %v, want %v", tc.body, tc.msg, got, tc.flat)
			continue
		}
		if !tc.flat {
			if !proto.Equal(flat, tc.msg) {
				t.Errorf("decodeFlat(%s) refused it and left %v, want the message reset", tc.body, flat)
			}
			continue
		}
		checked := tc.msg.ProtoReflect().New().Interface()
		if err := unmarshalChecked([]byte(tc.body), checked); err != nil {
			t.Errorf("the checked path refuses %s (%v), which decodeFlat took", tc.body, err)
		} else if d := cmp.Diff(checked, flat, protocmp.Transform()); d != "" {
			t.Errorf("decodeFlat(%s) differs from the checked path (-checked +flat):\n%s", tc.body, d)
		}
	}
}

// FuzzDecodeFlat: a body decodeFlat takes is one the checked path takes,
// into the same message; a body it does not take leaves the message empty.
func FuzzDecodeFlat(f *testing.F) {
	for _, body := range []string{
		`{"context":"product-list","ttl_seconds":30}`, `{"fencing_token":"7","outcome":"SUCCESS","latency_ms":3}`,
		`{"resource_id":"r","context":"c","outcome":"FAILURE","lease_id":"1","fencing_token":1}`,
		`{"lease_id":"l","fencing_token":"18446744073709551615","ttl_seconds":-2147483648}`,
		`{"ttl_seconds":-0}`, `{"latency_ms":4294967295}`, `{"fencing_token":"007"}`, `{"context":"\u00e9"}`,
		`{"resources":[{"id":"r","capacity":0}]}`, ` { } `, `{"context":"a","ttl_seconds":30 `,
	} {
		for i := range flatMessages() {
			f.Add(uint8(i), []byte(body))
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		msgs := flatMessages()
		kind := msgs[int(which)%len(msgs)]
		flat := kind.ProtoReflect().New().Interface()
		if !decodeFlat(body, flat) {
			if !proto.Equal(flat, kind) {
				t.Fatalf("decodeFlat(%q) into %T refused it and left %v, want it reset", body, kind, flat)
			}
			return
		}
		checked := kind.ProtoReflect().New().Interface()
		if err := unmarshalChecked(body, checked); err != nil {
			t.Fatalf("decodeFlat took %q into %T, the checked path refuses it: %v", body, kind, err)
		}
		if d := cmp.Diff(checked, flat, protocmp.Transform()); d != "" {
			t.Fatalf("decodeFlat(%q) into %T differs from the checked path (-checked +flat):\n%s", body, kind, d)
		}
	})
}
