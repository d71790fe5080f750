package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The stale-write audit. Triggers record, in the database itself, who
// raised each epoch and every write to the epoch-fenced tables (pool
// checkpoints, the lease journal, the audit log) with the client address
// of the session that made it and the epoch visible to it. Every server
// has its own address, so a write is legitimate only if its author is the
// server that raised the epoch the write ran under. The fence (a FOR SHARE
// lock on the epoch row in every fenced transaction) keeps the epoch from
// changing under a write, so a write of a deposed leader committed after
// its successor's bump would show up here as (author = old leader, epoch =
// new epoch).
const auditSQL = `
CREATE TABLE e2e_epochs (
    epoch  bigint PRIMARY KEY,
    author inet,
    at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE e2e_writes (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    author inet,
    tbl    text NOT NULL,
    op     text NOT NULL,
    epoch  bigint
);
CREATE FUNCTION e2e_epoch() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    INSERT INTO e2e_epochs (epoch, author) VALUES (NEW.value, inet_client_addr());
    RETURN NULL;
END $$;
CREATE TRIGGER e2e_epoch AFTER INSERT OR UPDATE ON server_counters
    FOR EACH ROW WHEN (NEW.name = 'epoch') EXECUTE FUNCTION e2e_epoch();
CREATE FUNCTION e2e_write() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    INSERT INTO e2e_writes (author, tbl, op, epoch)
    VALUES (inet_client_addr(), TG_TABLE_NAME, TG_OP,
            (SELECT value FROM server_counters WHERE name = 'epoch'));
    RETURN NULL;
END $$;
`

// fencedTables are written only under the epoch fence.
var fencedTables = []string{"lease_journal", "checkpoint_meta", "resources", "cells", "audit_log"}

// installAudit installs the triggers. leader is the server holding the
// current epoch (the only server running when this is called), which is
// recorded as its author.
func (c *cluster) installAudit(leader *server) {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sql := auditSQL
	for _, t := range fencedTables {
		sql += fmt.Sprintf("CREATE TRIGGER e2e_write AFTER INSERT OR UPDATE OR DELETE ON %s FOR EACH STATEMENT EXECUTE FUNCTION e2e_write();\n", t)
	}
	sql += fmt.Sprintf("INSERT INTO e2e_epochs (epoch, author) SELECT value, '%s' FROM server_counters WHERE name = 'epoch';\n", leader.host.addr)
	if _, err := c.db.Exec(ctx, sql); err != nil {
		c.tb.Fatalf("installing the write audit = got error %v, want nil", err)
	}
}

// epoch returns the store's current epoch.
func (c *cluster) epoch() uint64 {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var e int64
	if err := c.db.QueryRow(ctx, `SELECT value FROM server_counters WHERE name = 'epoch'`).Scan(&e); err != nil {
		c.tb.Fatalf("reading the epoch = got error %v, want nil", err)
	}
	return uint64(e)
}

// staleWrite is a write accepted from a server that did not hold the
// epoch it ran under.
type staleWrite struct {
	at            time.Time
	author, owner string
	table, op     string
	epoch         int64
}

func (w staleWrite) String() string {
	return fmt.Sprintf("%s %s on %s by %s under epoch %d (raised by %s)", w.at.Format("15:04:05.000"), w.op, w.table, w.author, w.epoch, w.owner)
}

// staleWrites returns every audited write whose author is not the server
// that raised its epoch, and the number of audited writes.
func (c *cluster) staleWrites(tb testing.TB) (stale []staleWrite, total int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.db.QueryRow(ctx, `SELECT count(*) FROM e2e_writes`).Scan(&total); err != nil {
		tb.Fatalf("counting audited writes = got error %v, want nil", err)
	}
	rows, err := c.db.Query(ctx, `
SELECT w.at, coalesce(host(w.author), 'local'), coalesce(host(e.author), 'nobody'), w.tbl, w.op, coalesce(w.epoch, -1)
FROM e2e_writes w LEFT JOIN e2e_epochs e ON e.epoch = w.epoch
WHERE e.author IS NULL OR w.author IS DISTINCT FROM e.author
ORDER BY w.id`)
	if err != nil {
		tb.Fatalf("querying audited writes = got error %v, want nil", err)
	}
	defer rows.Close()
	for rows.Next() {
		var w staleWrite
		if err := rows.Scan(&w.at, &w.author, &w.owner, &w.table, &w.op, &w.epoch); err != nil {
			tb.Fatalf("scanning an audited write = got error %v, want nil", err)
		}
		stale = append(stale, w)
	}
	if err := rows.Err(); err != nil {
		tb.Fatalf("querying audited writes = got error %v, want nil", err)
	}
	return stale, total
}

// writesBy counts the audited writes of the server at addr after since.
func (c *cluster) writesBy(tb testing.TB, addr string, since time.Time) int {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	if err := c.db.QueryRow(ctx, `SELECT count(*) FROM e2e_writes WHERE author = $1::inet AND at > $2`, addr, since).Scan(&n); err != nil {
		tb.Fatalf("counting writes of %s = got error %v, want nil", addr, err)
	}
	return n
}

// epochAuthors lists who raised which epoch, for the log.
func (c *cluster) epochAuthors(tb testing.TB) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := c.db.Query(ctx, `SELECT epoch, coalesce(host(author), 'local'), at FROM e2e_epochs ORDER BY epoch`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var e int64
		var a string
		var at time.Time
		if err := rows.Scan(&e, &a, &at); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "epoch %d raised by %s at %s; ", e, a, at.Format("15:04:05.000"))
	}
	return b.String()
}

// sessions lists the database's client sessions with what they wait for,
// for the log.
func (c *cluster) sessions() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := c.db.Query(ctx, `
SELECT coalesce(host(client_addr), 'local'), application_name, state, coalesce(wait_event_type || '/' || wait_event, ''),
       coalesce(extract(epoch FROM clock_timestamp() - xact_start)::numeric(10,3)::text || 's', '-'), left(regexp_replace(query, '\s+', ' ', 'g'), 100)
FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() ORDER BY client_addr, application_name`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var addr, app, state, wait, xact, query string
		if err := rows.Scan(&addr, &app, &state, &wait, &xact, &query); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "  %s %q %s wait=%s xact_age=%s: %s\n", addr, app, state, wait, xact, query)
	}
	return b.String()
}
