package open

import (
	"errors"
	"strings"
	"testing"

	"github.com/repool/repool/internal/store"
)

func TestParseURL(t *testing.T) {
	tests := []struct {
		name, url string
		wantKind  Kind
		wantPath  string
		wantErr   string // a part of the error; "" for none
	}{
		{name: "relative", url: "sqlite:./data/repool.db", wantKind: SQLiteFile, wantPath: "./data/repool.db"},
		{name: "absolute", url: "sqlite:/var/lib/repool.db", wantKind: SQLiteFile, wantPath: "/var/lib/repool.db"},
		{name: "double slash", url: "sqlite:///var/lib/repool.db", wantKind: SQLiteFile, wantPath: "/var/lib/repool.db"},
		{name: "memory", url: "sqlite::memory:", wantKind: SQLiteMemory, wantPath: ":memory:"},
		{name: "postgres", url: "postgres://u:pw@h/db", wantKind: Postgres},
		{name: "postgresql", url: "postgresql://h/db?sslmode=disable", wantKind: Postgres},
		{name: "sqlite without path", url: "sqlite:", wantErr: `sqlite path ""`},
		{name: "sqlite with parameters", url: "sqlite:a.db?mode=ro", wantErr: `sqlite path "a.db?mode=ro"`},
		{name: "empty", url: "", wantErr: "not a URL (no scheme)"},
		{name: "bare path", url: "./data/repool.db", wantErr: "not a URL (no scheme)"},
		{name: "key=value string", url: "host=h password=s3cret", wantErr: "not a URL (no scheme)"},
		{name: "mysql", url: "mysql://u:s3cret@h/db", wantErr: `unknown scheme "mysql", want sqlite:PATH, sqlite::memory: or postgres://...`},
		{name: "postgres without slashes", url: "postgres:s3cret@h", wantErr: `unknown scheme "postgres"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u, err := ParseURL(tc.url)
			if tc.wantErr != "" {
				if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseURL(%q) = got error %v, want ErrInvalid with %q", tc.url, err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("ParseURL(%q) = got error %q, want no password in it", tc.url, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseURL(%q) = got error %v, want nil", tc.url, err)
			}
			if u.Kind != tc.wantKind || u.Path != tc.wantPath || u.String() != tc.url {
				t.Fatalf("ParseURL(%q) = got kind %d, path %q, string %q, want %d, %q, %q", tc.url, u.Kind, u.Path, u.String(), tc.wantKind, tc.wantPath, tc.url)
			}
		})
	}
}

func TestRedacted(t *testing.T) {
	tests := []struct{ url, want string }{
		{"postgres://repool:s3cret@127.0.0.1:5432/db?sslmode=disable", "postgres://repool:***@127.0.0.1:5432/db?sslmode=disable"},
		{"postgresql://repool:p@ss:w@rd@h/db", "postgresql://repool:***@h/db"},
		{"postgres://repool@h/db", "postgres://repool@h/db"},
		{"postgres://h/db?user=repool&password=s3cret&sslmode=disable", "postgres://h/db?user=repool&password=***&sslmode=disable"},
		{"postgres://h/db?pass%77ord=s3cret", "postgres://h/db?pass%77ord=***"},
		{"postgres://u:s3cret@h1:5432,h2:5433/db#frag", "postgres://u:***@h1:5432,h2:5433/db#frag"},
		{"postgres://h?password=s3cret#x", "postgres://h?password=***#x"},
		{"postgres://h/path@x:y", "postgres://h/path@x:y"},
		{"sqlite:/var/lib/a:b@c.db", "sqlite:/var/lib/a:b@c.db"},
	}
	for _, tc := range tests {
		u, err := ParseURL(tc.url)
		if err != nil {
			t.Fatalf("ParseURL(%q) = got error %v, want nil", tc.url, err)
		}
		if got := u.Redacted(); got != tc.want {
			t.Errorf("ParseURL(%q).Redacted() = got %q, want %q", tc.url, got, tc.want)
		}
	}
}

func TestWithQueryDefaults(t *testing.T) {
	defaults := map[string]string{"idle_in_transaction_session_timeout": "2000", "tcp_keepalives_count": "2"}
	tests := []struct{ url, want string }{
		{"postgres://u:pw@h/db", "postgres://u:pw@h/db?idle_in_transaction_session_timeout=2000&tcp_keepalives_count=2"},
		{"postgres://h/db?tcp_keepalives_count=5&sslmode=disable", "postgres://h/db?idle_in_transaction_session_timeout=2000&sslmode=disable&tcp_keepalives_count=5"},
		{"postgres://h:bad port/db", "postgres://h:bad port/db"}, // net/url refuses it: unchanged
		{"sqlite:/var/lib/a.db", "sqlite:/var/lib/a.db"},
	}
	for _, tc := range tests {
		u, err := ParseURL(tc.url)
		if err != nil {
			t.Fatalf("ParseURL(%q) = got error %v, want nil", tc.url, err)
		}
		got := u.WithQueryDefaults(defaults)
		if got.String() != tc.want || got.Kind != u.Kind || got.Path != u.Path {
			t.Errorf("ParseURL(%q).WithQueryDefaults(...) = got %q (kind %d), want %q (kind %d)", tc.url, got, got.Kind, tc.want, u.Kind)
		}
	}
}

func TestSQLite(t *testing.T) {
	u, err := SQLite("/var/lib/repool.db")
	if err != nil || u.Kind != SQLiteFile || u.Path != "/var/lib/repool.db" || u.String() != "sqlite:/var/lib/repool.db" {
		t.Fatalf("SQLite(/var/lib/repool.db) = got %+v, %v, want a SQLiteFile URL sqlite:/var/lib/repool.db", u, err)
	}
	if _, err := SQLite("a.db?mode=ro"); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("SQLite(a.db?mode=ro) = got error %v, want ErrInvalid", err)
	}
}
