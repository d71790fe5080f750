package pool

import (
	"math"
	"testing"
)

func TestExp2negMatchesMathExp2(t *testing.T) {
	for x := 0.0; x > -60; x -= 0.0137 {
		got, want := exp2neg(x), math.Exp2(x)
		if rel := math.Abs(got-want) / want; rel > 2e-7 {
			t.Fatalf("exp2neg(%v) = %v, want %v (relative error %v)", x, got, want, rel)
		}
	}
	for k := 0; k <= 60; k++ {
		if got, want := exp2neg(-float64(k)), math.Ldexp(1, -k); got != want {
			t.Fatalf("exp2neg(%d) = %v, want exactly %v", -k, got, want)
		}
		// Either side of a rounding boundary.
		for _, x := range []float64{-float64(k) - 0.5, math.Nextafter(-float64(k)-0.5, 0), math.Nextafter(-float64(k)-0.5, -100)} {
			if got, want := exp2neg(x), math.Exp2(x); math.Abs(got-want)/want > 2e-7 {
				t.Fatalf("exp2neg(%v) = %v, want %v", x, got, want)
			}
		}
	}
	if got := exp2neg(-2000); got != 0 {
		t.Fatalf("exp2neg(-2000) = %v, want 0", got)
	}
}

func BenchmarkExp2neg(b *testing.B) {
	x, s := -0.3, 0.0
	for b.Loop() {
		s += exp2neg(x)
		x -= 1e-9
	}
	_ = s
}
