package open

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/postgres"
	"github.com/repool/repool/internal/store/sqlite"
)

// Kind is the kind of store a URL names.
type Kind int

// The kinds of store.
const (
	SQLiteFile   Kind = iota + 1 // sqlite:PATH
	SQLiteMemory                 // sqlite::memory:
	Postgres                     // postgres://... or postgresql://...
)

// URL is a parsed store URL (the --store flag). The zero URL is not
// valid; ParseURL makes one.
type URL struct {
	// Kind is the kind of store.
	Kind Kind
	// Path is the SQLite database file (sqlite.Memory for SQLiteMemory);
	// "" for Postgres.
	Path string

	raw string
}

// usage lists the URLs ParseURL takes, for its errors.
const usage = "want sqlite:PATH, sqlite::memory: or postgres://..."

// ParseURL parses a store URL:
//
//	sqlite:PATH             SQLite file; sqlite://PATH is tolerated too
//	sqlite::memory:         private in-memory SQLite database (tests)
//	postgres://... or postgresql://...   PostgreSQL, as pgx reads it
//
// Anything else, and a SQLite path that sqlite.Open refuses, returns
// store.ErrInvalid. The error quotes the scheme, or the SQLite path, and
// nothing else: the rest of a URL may hold a password. A PostgreSQL URL is
// checked no further here: opening it does (pgx).
func ParseURL(s string) (URL, error) {
	if path, ok := strings.CutPrefix(s, "sqlite:"); ok {
		path = strings.TrimPrefix(path, "//")
		if err := sqlite.CheckPath(path); err != nil {
			return URL{}, err
		}
		kind := SQLiteFile
		if path == sqlite.Memory {
			kind = SQLiteMemory
		}
		return URL{Kind: kind, Path: path, raw: s}, nil
	}
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		return URL{Kind: Postgres, raw: s}, nil
	}
	scheme, _, ok := strings.Cut(s, ":")
	if !ok || !validScheme(scheme) {
		// Not a URL: perhaps a path, or a key=value connection string
		// with a password in it.
		return URL{}, fmt.Errorf("%w: store url: not a URL (no scheme), %s", store.ErrInvalid, usage)
	}
	return URL{}, fmt.Errorf("%w: store url: unknown scheme %q, %s", store.ErrInvalid, scheme, usage)
}

// SQLite returns the URL of the SQLite database file path (or
// sqlite.Memory), as ParseURL("sqlite:"+path) does.
func SQLite(path string) (URL, error) { return ParseURL("sqlite:" + path) }

// validScheme reports whether s is a URL scheme (RFC 3986: a letter, then
// letters, digits, '+', '-' or '.').
func validScheme(s string) bool {
	for i, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}

// String returns the URL as given, password and all: log Redacted.
func (u URL) String() string { return u.raw }

// Redacted returns the URL with the password of a PostgreSQL URL (in
// its user info or a password= parameter) replaced by "***", for logs
// and errors.
func (u URL) Redacted() string {
	if u.Kind != Postgres {
		return u.raw
	}
	scheme, rest, _ := strings.Cut(u.raw, "://")
	// The authority ends where the path, query or fragment starts; the
	// user info is what comes before its last '@'.
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		if colon := strings.Index(authority[:at], ":"); colon >= 0 {
			authority = authority[:colon+1] + "***" + authority[at:]
		}
	}
	path, query, hasQuery := strings.Cut(tail, "?")
	if hasQuery {
		query, fragment, hasFragment := strings.Cut(query, "#")
		params := strings.Split(query, "&")
		for i, p := range params {
			if k, _, ok := strings.Cut(p, "="); ok {
				if name, err := url.QueryUnescape(k); err == nil && name == "password" {
					params[i] = k + "=***"
				}
			}
		}
		path += "?" + strings.Join(params, "&")
		if hasFragment {
			path += "#" + fragment
		}
	}
	return scheme + "://" + authority + path
}

// WithQueryDefaults returns a PostgreSQL URL with the query parameters of
// defaults that it does not set itself added (session settings such as
// idle_in_transaction_session_timeout); other URLs, and one that
// net/url cannot parse (opening it reports that), come back unchanged.
func (u URL) WithQueryDefaults(defaults map[string]string) URL {
	if u.Kind != Postgres {
		return u
	}
	pu, err := url.Parse(u.raw)
	if err != nil {
		return u
	}
	q := pu.Query()
	for k, v := range defaults {
		if q.Get(k) == "" {
			q.Set(k, v)
		}
	}
	pu.RawQuery = q.Encode()
	u.raw = pu.String()
	return u
}

// Open opens the store u names with opts and applies its migrations (with
// opts.ReadOnly: checks that the schema is there). A database that cannot
// be reached returns store.ErrUnavailable. The caller closes the store.
func (u URL) Open(ctx context.Context, opts store.Options) (store.Store, error) {
	switch u.Kind {
	case SQLiteFile, SQLiteMemory:
		s, err := sqlite.Open(ctx, u.Path, opts)
		if err != nil {
			return nil, err
		}
		return s, nil
	case Postgres:
		s, err := postgres.Open(ctx, u.raw, opts)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	return nil, fmt.Errorf("%w: store url: not parsed (use ParseURL)", store.ErrInvalid)
}
