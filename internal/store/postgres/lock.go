package postgres

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/repool/repool/internal/store"
)

// WriterLockID is the session advisory lock key that the server writing
// the store holds: a server outside an active/standby group takes it with
// LockWriter, a group's active server through the leader election
// (internal/ha), so that the two exclude each other too. It differs from
// the lock goose takes for migrations.
const WriterLockID int64 = 0x7265706f6f6c // "repool"

// GroupLockID is the leader lock of the active/standby set of group g
// (tenant-sharded groups): WriterLockID for the default group, so that a
// deployment without groups is unchanged, and a hash of the name for the
// others, so that each group elects its own active server.
func GroupLockID(g string) int64 {
	if g == "" || g == store.DefaultGroup {
		return WriterLockID
	}
	h := fnv.New64a()
	h.Write([]byte("repool-group:" + g))
	return int64(h.Sum64() &^ (1 << 63))
}

// LockWriter implements store.WriterLock: it takes the session advisory
// lock on a connection of its own and fails at once with store.ErrLocked
// if another session holds it, naming that session. The claim lasts as
// long as the connection: Check fails once it is gone (the database
// restarted, the network cut), since another server may then take the
// lock.
func (s *Store) LockWriter(ctx context.Context) (store.Claim, error) {
	cfg, err := pgx.ParseConfig(s.dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: postgres: cannot parse the connection string", store.ErrInvalid)
	}
	cfg.RuntimeParams["application_name"] = "repool-writer"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: writer lock: %w", classify(err))
	}
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, WriterLockID).Scan(&got); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("postgres: writer lock: %w", classify(err))
	}
	if !got {
		owner := "another session"
		var app, addr string
		var pid int32
		if err := conn.QueryRow(ctx, `
SELECT a.pid, coalesce(a.application_name, ''), coalesce(host(a.client_addr), 'local socket')
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objid = ($1::bigint & x'ffffffff'::bigint)::oid LIMIT 1`,
			WriterLockID).Scan(&pid, &app, &addr); err == nil {
			owner = fmt.Sprintf("database session %d (application %q, from %s)", pid, app, addr)
		}
		conn.Close(ctx)
		return nil, fmt.Errorf("%w: the PostgreSQL store is held by %s; stop that server, or run every server with --ha to form an active/standby group",
			store.ErrLocked, owner)
	}
	return &sessionClaim{conn: conn}, nil
}

// sessionClaim is held as long as its connection lives.
type sessionClaim struct {
	mu   sync.Mutex
	conn *pgx.Conn
}

func (c *sessionClaim) Check(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.conn.Ping(ctx); err != nil {
		return fmt.Errorf("the database session holding the writer lock is gone: %w", classify(err))
	}
	return nil
}

func (c *sessionClaim) Release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn.Close(context.Background())
}

var _ store.WriterLock = (*Store)(nil)
