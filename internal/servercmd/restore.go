package servercmd

import (
	"context"
	"flag"
	"fmt"

	"github.com/repool/repool/internal/cli"
	"github.com/repool/repool/internal/store/sqlite"
)

const restoreUsage = `usage: ` + Prog + ` restore --from FILE [--store URL | --config FILE]

Make FILE, a backup that "` + Prog + ` backup" wrote, the database of the
server's SQLite store (found as "` + Prog + ` run" finds it). Stop the server
first: restore refuses a store a server holds, and holds it itself while it
runs. The store's current database, -wal, -shm and -leases files are moved
into a new directory beside it (PATH.before-restore-TIME, printed), FILE is
copied into place, and the epoch mark (PATH-epoch) stays, so that the next
start hands out fencing tokens above every one handed out before. Then start
the server. A refusal changes nothing.
`

// restore is "server restore": a backup made the store's database.
func restore(ctx context.Context, args []string, env Env) error {
	fs := flag.NewFlagSet(Prog+" restore", flag.ContinueOnError)
	fs.Usage = cli.Usage(fs, restoreUsage)
	from := fs.String("from", "", "the backup `file` to restore (required)")
	path, err := sqliteStorePath(fs, args, env, "--from FILE is required: the backup to restore", from,
		"cannot be restored from another", "restore it with pgBackRest (docs/ha.md, \"Backup and restore\"); "+Prog+" restore restores a SQLite store")
	if err != nil {
		return err
	}
	aside, err := sqlite.Restore(ctx, path, *from)
	if err != nil {
		return err
	}
	if aside == "" {
		fmt.Fprintf(env.Stdout, "restored %s from %s (it had no database before)\n", path, *from)
		return nil
	}
	fmt.Fprintf(env.Stdout, "restored %s from %s; its previous files are in %s (remove them once the restored server serves)\n", path, *from, aside)
	return nil
}
