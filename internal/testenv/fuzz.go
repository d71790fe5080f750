package testenv

import (
	"strings"
	"testing"
	"time"
)

// FuzzBound is how long one input of a fuzz target may take: parsing a
// file or serving a request, measured inside the target. It is generous
// (the race detector and a busy machine slow inputs down a lot); it is
// there to catch hangs and inputs that cost seconds, not to measure speed.
const FuzzBound = 2 * time.Second

// Timed runs fn and fails t if it took longer than FuzzBound.
func Timed(t testing.TB, what string, fn func()) {
	t.Helper()
	start := time.Now()
	fn()
	if d := time.Since(start); d > FuzzBound {
		t.Fatalf("%s took %v, want at most %v", what, d, FuzzBound)
	}
}

// MinSecretLen is the shortest secret NoSecret looks for: a shorter one
// could appear in a message by chance (a field name, a number).
const MinSecretLen = 8

// NoSecret fails t if msg contains one of secrets. Secrets shorter than
// MinSecretLen are not looked for.
func NoSecret(t testing.TB, what, msg string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if len(s) >= MinSecretLen && strings.Contains(msg, s) {
			t.Fatalf("%s = %q, which contains the secret %q", what, msg, s)
		}
	}
}
