package testenv

import (
	"bufio"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

func TestPostgres(t *testing.T) {
	dsn1, dsn2 := Postgres(t), Postgres(t)
	if dsn1 == dsn2 {
		t.Fatalf("Postgres(t) twice = got %q both times, want two databases", dsn1)
	}
	ctx := t.Context()
	c1, err := pgx.Connect(ctx, dsn1)
	if err != nil {
		t.Fatalf("pgx.Connect(ctx, %q) = got error %v, want nil", dsn1, err)
	}
	defer c1.Close(ctx)
	var one int
	if err := c1.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = got %d, %v, want 1, nil", one, err)
	}
	var version int
	if err := c1.QueryRow(ctx, "SELECT current_setting('server_version_num')::int / 10000").Scan(&version); err != nil || version != 15 {
		t.Fatalf("server major version = got %d, %v, want 15", version, err)
	}
	if _, err := c1.Exec(ctx, "CREATE TABLE only_here (x int)"); err != nil {
		t.Fatalf("CREATE TABLE = got error %v, want nil", err)
	}

	c2, err := pgx.Connect(ctx, dsn2)
	if err != nil {
		t.Fatalf("pgx.Connect(ctx, %q) = got error %v, want nil", dsn2, err)
	}
	defer c2.Close(ctx)
	var n int
	if err := c2.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_here'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("tables of the second database = got %d only_here, %v, want 0 (databases are isolated)", n, err)
	}
}

func TestRedis(t *testing.T) {
	addr, stop := Redis(t)
	if got := rawPing(t, addr); got != "+PONG\r\n" {
		t.Fatalf("PING %s = got %q, want +PONG", addr, got)
	}
	other, _ := Redis(t)
	if other == addr {
		t.Fatalf("Redis(t) twice = got %s both times, want two servers", addr)
	}
	stop()
	stop() // idempotent
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Fatalf("dial %s after stop = got a connection, want refused", addr)
	}
	if got := rawPing(t, other); got != "+PONG\r\n" {
		t.Fatalf("PING %s after stopping the other server = got %q, want +PONG", other, got)
	}
}

func rawPing(t *testing.T, addr string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatalf("dial %s = got error %v, want nil", addr, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		t.Fatalf("write PING to %s = got error %v, want nil", addr, err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("read PING reply from %s = got error %v, want nil", addr, err)
	}
	return line
}

func TestFreePort(t *testing.T) {
	port := FreePort(t)
	if port <= 0 || port > 65535 {
		t.Fatalf("FreePort(t) = got %d, want a TCP port", port)
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("listen on FreePort(t) = got error %v, want nil", err)
	}
	l.Close()
}

// TestFreePortNeverRepeats: 2,000 ports taken one after another, none
// bound, are distinct (drawn at random from the kernel's ~28,000 ephemeral
// ports they would repeat about 70 times).
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]int{}
	for i := range 2000 {
		p := FreePort(t)
		if j, ok := seen[p]; ok {
			t.Fatalf("FreePort call %d = got %d, which call %d returned", i, p, j)
		}
		seen[p] = i
	}
}

func TestShellQuote(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{name: "plain", in: "/tmp/x", want: `'/tmp/x'`},
		{name: "space", in: "a b", want: `'a b'`},
		{name: "quote", in: "it's", want: `'it'\''s'`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := shellQuote(tc.in); got != tc.want {
				t.Fatalf("shellQuote(%q) = got %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}
