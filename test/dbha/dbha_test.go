// Package dbha tests repool on its database tier as docs/ha.md builds it
// (package test/internal/dbtier: three PostgreSQL nodes under Patroni
// with synchronous replication, three etcd members, from the shipped
// files) and on its backups: the cost of synchronous replication, and
// the backup and restore drills. It runs as root (scripts/test does):
// each database node is a network namespace of its own (netns_test.go);
// HAProxy and the servers run on loopback addresses and ports chosen free
// at run time. The database tier's failover under load is test/e2e's
// TestDatabaseFailover.
package dbha

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/repool/repool/internal/server"
	"github.com/repool/repool/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// repoolServer is one in-process repool server.
type repoolServer struct {
	s      *server.Server
	cancel context.CancelFunc
}

// syncWriter is a strings.Builder safe for concurrent writes.
type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// demoKey finds the demo API key in a first-start banner.
func demoKey(banner string) string {
	_, rest, ok := strings.Cut(banner, "demo API key:")
	if !ok {
		return ""
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// activeStatus is the status of the server's /readyz/active (0 if it does
// not answer).
func activeStatus(r *repoolServer) int {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + r.s.HTTPAddr() + "/readyz/active")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
