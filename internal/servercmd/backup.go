package servercmd

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/repool/repool/internal/cli"
	"github.com/repool/repool/internal/store/open"
	"github.com/repool/repool/internal/store/sqlite"
)

const backupUsage = `usage: ` + Prog + ` backup --to FILE [--store URL | --config FILE]

Write a consistent copy of the server's SQLite store (found as "` + Prog + ` run"
finds it: --store, REPOOL_STORE, the --config file, the default) to FILE,
while the server serves. SQLite takes the copy (VACUUM INTO, one snapshot
of every table); the leases journaled in the lease log since its last fold
are folded into the copy, so FILE is one self-contained database. It holds
every tenant, key, limit and resource committed when the copy was taken,
the statistics of the server's last checkpoint flush before then
(--report-flush, 1s), and every lease journaled until the copy was done.
FILE must not exist; nothing is written over. The store is only read.
Put it back with "` + Prog + ` restore --from FILE", the server stopped
(docs/server.md, "Backup and restore (SQLite)"). A PostgreSQL store is
backed up with pgBackRest (docs/ha.md).
`

// backup is "server backup": an online copy of a SQLite store.
func backup(ctx context.Context, args []string, env Env) error {
	fs := flag.NewFlagSet(Prog+" backup", flag.ContinueOnError)
	fs.Usage = cli.Usage(fs, backupUsage)
	to := fs.String("to", "", "the backup `file` to write; it must not exist (required)")
	var storeURL string
	err := cli.Parse(fs, env.Stdout, env.Stderr, func() error {
		var err error
		storeURL, err = LoadStore(fs, args, env.Getenv)
		return err
	})
	if err != nil {
		return err
	}
	if *to == "" {
		return fmt.Errorf("--to FILE is required: the file to write the backup to")
	}
	u, err := open.ParseURL(storeURL)
	if err != nil {
		return err
	}
	switch u.Kind {
	case open.SQLiteMemory:
		return fmt.Errorf("store %s lives in its server's process and cannot be backed up from another; name a file store (--store, REPOOL_STORE or --config)", storeURL)
	case open.Postgres:
		return fmt.Errorf("store %s is PostgreSQL: back it up with pgBackRest, continuously (docs/ha.md, \"Backup and restore\"); %s backup copies a SQLite store", u.Redacted(), Prog)
	}
	start := time.Now()
	info, err := sqlite.Backup(ctx, u.Path, *to)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "backup of %s written to %s in %v: %d tenants, %d resources, %d journaled leases (%d lease-log records folded in), %d bytes\n",
		u.Path, *to, time.Since(start).Round(time.Millisecond), info.Tenants, info.Resources, info.Leases, info.LogRecords, info.Bytes)
	return nil
}
