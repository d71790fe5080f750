package open

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/testenv"
)

// FuzzParseURL checks that any input either parses into a URL that gives
// it back, or fails with store.ErrInvalid and an error that quotes only
// the scheme (or a SQLite path); and that a PostgreSQL URL's Redacted form
// keeps no password that net/url finds in it. No input takes longer than
// testenv.FuzzBound.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"sqlite:a.db", "sqlite::memory:", "sqlite://x", "postgres://u:pw@h/db?password=x",
		"postgresql://h", "mysql://u:p@h", "host=h password=p", "", ":", "sqlite:", "a:b:c", "postgres://u:p@h@i/x?y#z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var (
			u   URL
			err error
		)
		testenv.Timed(t, "ParseURL", func() { u, err = ParseURL(s) })
		if err != nil {
			if !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("ParseURL(%q) = got error %v, want ErrInvalid", s, err)
			}
			if path, ok := strings.CutPrefix(s, "sqlite:"); ok {
				path = strings.TrimPrefix(path, "//")
				want := fmt.Sprintf("%v: sqlite path %q: want a file name without '?' or \":memory:\"", store.ErrInvalid, path)
				if err.Error() != want {
					t.Fatalf("ParseURL(%q) = got error %q, want %q", s, err, want)
				}
				return
			}
			scheme, _, _ := strings.Cut(s, ":")
			want := []string{
				fmt.Sprintf("%v: store url: not a URL (no scheme), %s", store.ErrInvalid, usage),
				fmt.Sprintf("%v: store url: unknown scheme %q, %s", store.ErrInvalid, scheme, usage),
			}
			if err.Error() != want[0] && (err.Error() != want[1] || !validScheme(scheme)) {
				t.Fatalf("ParseURL(%q) = got error %q, want %q or %q", s, err, want[0], want[1])
			}
			return
		}
		if u.String() != s {
			t.Fatalf("ParseURL(%q).String() = got %q, want the input", s, u.String())
		}
		switch u.Kind {
		case SQLiteFile, SQLiteMemory:
			if !strings.HasSuffix(s, u.Path) || (u.Kind == SQLiteMemory) != (u.Path == ":memory:") {
				t.Fatalf("ParseURL(%q) = got kind %d, path %q", s, u.Kind, u.Path)
			}
			if u.Redacted() != s {
				t.Fatalf("ParseURL(%q).Redacted() = got %q, want the input", s, u.Redacted())
			}
		case Postgres:
			orig, err := url.Parse(s)
			if err != nil {
				return
			}
			var redacted string
			testenv.Timed(t, "Redacted", func() { redacted = u.Redacted() })
			red, err := url.Parse(redacted)
			if err != nil {
				t.Fatalf("url.Parse(Redacted() of %q = %q) = got error %v, want nil", s, u.Redacted(), err)
			}
			if _, ok := orig.User.Password(); ok {
				if p, _ := red.User.Password(); p != "***" {
					t.Fatalf("ParseURL(%q).Redacted() = got %q, want password ***", s, u.Redacted())
				}
			}
			if q, err := url.ParseQuery(orig.RawQuery); err == nil {
				rq, _ := url.ParseQuery(red.RawQuery)
				for _, p := range rq["password"] {
					if p != "***" {
						t.Fatalf("ParseURL(%q).Redacted() = got %q, want password=***", s, u.Redacted())
					}
				}
				if len(rq["password"]) != len(q["password"]) {
					t.Fatalf("ParseURL(%q).Redacted() = got %q, want as many password parameters", s, u.Redacted())
				}
			}
		default:
			t.Fatalf("ParseURL(%q) = got kind %d", s, u.Kind)
		}
	})
}
