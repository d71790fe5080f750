package server

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/open"
	"github.com/repool/repool/internal/store/postgres"
	"github.com/repool/repool/internal/testenv"
)

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRestartWaitsForItsStore: a server started while another holder has
// its store's writer claim — a killed predecessor's PostgreSQL session or
// SQLite lock lasts a few seconds — waits for it (the default
// --store-lock-wait), logging once that it waits and naming the holder,
// takes the claim as soon as it is free, logs that once, and serves.
func TestRestartWaitsForItsStore(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(testing.TB) string
		hold  func(t *testing.T, st string) (release func())
	}{
		{"sqlite", sqliteStore, holdSQLite},
		{"postgres", testenv.Postgres, holdPostgres},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.store(t)
			release := tc.hold(t, st)
			var logs syncBuffer
			type result struct {
				s   *Server
				err error
			}
			done := make(chan result, 1)
			go func() {
				s, err := New(context.Background(), Config{Store: st, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", CheckpointInterval: time.Hour},
					Options{Out: &bytes.Buffer{}, Log: slog.New(slog.NewTextHandler(&logs, nil))})
				done <- result{s, err}
			}()
			testenv.Eventually(t, 20*time.Second, "the server to say it waits for its store", func() bool {
				return strings.Contains(logs.String(), "store in use: waiting for it to be free")
			})
			select {
			case r := <-done:
				t.Fatalf("New() returned (%v) while the store was held, want it waiting", r.err)
			default:
			}
			release()
			var r result
			select {
			case r = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("New() did not return within 20s of the store being freed")
			}
			if r.err != nil {
				t.Fatalf("New() after the store was freed = %v, want a server", r.err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan error, 1)
			go func() { ran <- r.s.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-ran; err != nil {
					t.Errorf("Run() = %v", err)
				}
			}()
			out := logs.String()
			if n := strings.Count(out, "store in use: waiting"); n != 1 || !strings.Contains(out, "store claimed after waiting") {
				t.Fatalf("log: %d waiting lines, claimed line %v; want one of each:\n%s", n, strings.Contains(out, "store claimed after waiting"), out)
			}
			testenv.Eventually(t, 20*time.Second, "the server to be ready", func() bool { return r.s.ready.Load() })
		})
	}
}

// holdSQLite claims a SQLite store as another server would.
func holdSQLite(t *testing.T, st string) func() {
	u, err := open.ParseURL(st)
	if err != nil {
		t.Fatal(err)
	}
	s, err := u.Open(context.Background(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.(store.WriterLock).LockWriter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() { once.Do(func() { c.Release(); s.Close() }) }
	t.Cleanup(release)
	return release
}

// holdPostgres takes the writer lock in a session of its own, as a killed
// server's session holds it until PostgreSQL notices the dead connection.
func holdPostgres(t *testing.T, dsn string) func() {
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(context.Background(), `SELECT pg_advisory_lock($1)`, postgres.WriterLockID); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() { once.Do(func() { conn.Close(context.Background()) }) }
	t.Cleanup(release)
	return release
}
