package defaults

import (
	"testing"
	"time"
)

type inner struct {
	N int
	R float64
}

type outer struct {
	D     time.Duration
	S     string
	In    inner
	Flag  bool
	Count uint32
}

// TestFill: zero fields take the default's, set ones (negative ones
// included) stay, nested structs field by field.
func TestFill(t *testing.T) {
	d := outer{D: time.Second, S: "def", In: inner{N: 5, R: 0.5}, Flag: true, Count: 3}
	tests := []struct {
		name    string
		v, want outer
	}{
		{"zero takes every default", outer{}, d},
		{"set fields stay", outer{D: -1, S: "x", In: inner{N: -2}}, outer{D: -1, S: "x", In: inner{N: -2, R: 0.5}, Flag: true, Count: 3}},
		{"all set", outer{D: 2, S: "y", In: inner{N: 1, R: 1}, Flag: true, Count: 9}, outer{D: 2, S: "y", In: inner{N: 1, R: 1}, Flag: true, Count: 9}},
	}
	for _, tt := range tests {
		if got := Fill(tt.v, d); got != tt.want {
			t.Errorf("%s: Fill(%+v) = %+v, want %+v", tt.name, tt.v, got, tt.want)
		}
	}
}
