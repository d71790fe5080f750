package labels

import (
	"reflect"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		in   map[string]string
		want string
	}{
		{name: "nil", in: nil, want: "{}"},
		{name: "empty", in: map[string]string{}, want: "{}"},
		{name: "sorted", in: map[string]string{"z": "1", "a": "2"}, want: `{"a":"2","z":"1"}`},
		{name: "quotes", in: map[string]string{`k"`: "v\n"}, want: `{"k\"":"v\n"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Encode(tc.in)
			if got != tc.want {
				t.Fatalf("Encode(%v) = got %q, want %q", tc.in, got, tc.want)
			}
			back, err := Decode(got)
			if err != nil {
				t.Fatalf("Decode(%q) = got error %v, want nil", got, err)
			}
			if len(tc.in) == 0 {
				if back != nil {
					t.Fatalf("Decode(%q) = got %v, want nil", got, back)
				}
				return
			}
			if !reflect.DeepEqual(back, tc.in) {
				t.Fatalf("Decode(%q) = got %v, want %v", got, back, tc.in)
			}
		})
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, in := range []string{"", "{", "null", "[]", `{"a":1}`, `"x"`} {
		t.Run(in, func(t *testing.T) {
			if got, err := Decode(in); err == nil {
				t.Fatalf("Decode(%q) = got %v, nil, want an error", in, got)
			}
		})
	}
}
