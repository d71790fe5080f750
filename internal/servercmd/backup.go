package servercmd

import (
	"context"
	"errors"
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
	path, err := sqliteStorePath(fs, args, env, "--to FILE is required: the file to write the backup to", to,
		"cannot be backed up from another", "back it up with pgBackRest, continuously (docs/ha.md, \"Backup and restore\"); "+Prog+" backup copies a SQLite store")
	if err != nil {
		return err
	}
	start := time.Now()
	info, err := sqlite.Backup(ctx, path, *to)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "backup of %s written to %s in %v: %d tenants, %d resources, %d journaled leases (%d lease-log records folded in), %d bytes\n",
		path, *to, time.Since(start).Round(time.Millisecond), info.Tenants, info.Resources, info.Leases, info.LogRecords, info.Bytes)
	return nil
}

// sqliteStorePath parses the flags of backup or restore, requires *file
// (missing: the error need), and returns the path of the SQLite file store
// they name. A store in memory is refused saying it cannot be reached
// (memory: how), a PostgreSQL store pointing at its tool (postgres).
func sqliteStorePath(fs *flag.FlagSet, args []string, env Env, need string, file *string, memory, postgres string) (string, error) {
	var storeURL string
	err := cli.Parse(fs, env.Stdout, env.Stderr, func() error {
		var err error
		storeURL, err = LoadStore(fs, args, env.Getenv)
		return err
	})
	if err != nil {
		return "", err
	}
	if *file == "" {
		return "", errors.New(need)
	}
	u, err := open.ParseURL(storeURL)
	if err != nil {
		return "", err
	}
	switch u.Kind {
	case open.SQLiteMemory:
		return "", fmt.Errorf("store %s lives in its server's process and %s; name a file store (--store, REPOOL_STORE or --config)", storeURL, memory)
	case open.Postgres:
		return "", fmt.Errorf("store %s is PostgreSQL: %s", u.Redacted(), postgres)
	}
	return u.Path, nil
}
