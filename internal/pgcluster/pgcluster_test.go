package pgcluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestCluster(t *testing.T) {
	if BinDir() == "" {
		t.Fatal("PostgreSQL is not installed: run scripts/test, which installs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, Config{})
	if err != nil {
		t.Fatalf("Start(ctx, Config{}) = got error %v, want nil", err)
	}
	defer c.Close()

	a, err := c.CreateDB(ctx, "x")
	if err != nil {
		t.Fatalf("CreateDB(ctx, x) = got error %v, want nil", err)
	}
	b, err := c.CreateDB(ctx, "x")
	if err != nil {
		t.Fatalf("CreateDB(ctx, x) = got error %v, want nil", err)
	}
	if a != "x_1" || b != "x_2" {
		t.Fatalf("CreateDB(ctx, x) twice = got %s, %s, want x_1, x_2", a, b)
	}
	conn, err := pgx.Connect(ctx, c.URL(a))
	if err != nil {
		t.Fatalf("pgx.Connect(ctx, %q) = got error %v, want nil", c.URL(a), err)
	}
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil || db != a {
		t.Fatalf("current_database() = got %q, %v, want %q, nil", db, err, a)
	}
	if err := c.DropDB(ctx, a); err != nil { // closes conn's session
		t.Fatalf("DropDB(ctx, %s) = got error %v, want nil", a, err)
	}
	conn.Close(ctx)
	if err := c.DropDB(ctx, a); err != nil {
		t.Fatalf("DropDB(ctx, %s) again = got error %v, want nil (IF EXISTS)", a, err)
	}

	dir := c.Dir()
	if err := c.Close(); err != nil {
		t.Fatalf("Close() = got error %v, want nil", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat %s after Close = got error %v, want not exist", dir, err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close() again = got error %v, want nil", err)
	}
}

func TestStartNotInstalled(t *testing.T) {
	_, err := Start(t.Context(), Config{BinDir: filepath.Join(t.TempDir(), "no-bin")})
	if !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("Start with a missing BinDir = got error %v, want ErrNotInstalled", err)
	}
}

func TestServerArgs(t *testing.T) {
	got := ServerArgs("/d", "10.0.0.1", 5432, "/s")
	for _, want := range [][]string{
		{"-D", "/d"},
		{"-c", "listen_addresses=10.0.0.1"},
		{"-c", "port=5432"},
		{"-c", "unix_socket_directories=/s"},
		{"-c", "fsync=off"},
	} {
		if !containsPair(got, want[0], want[1]) {
			t.Errorf("ServerArgs(...) = got %q, want the pair %q", got, want)
		}
	}
}

// containsPair reports whether args holds flag immediately followed by value.
func containsPair(args []string, flag, value string) bool {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag && args[i+1] == value {
			return true
		}
	}
	return false
}
