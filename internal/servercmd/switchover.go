package servercmd

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repool/repool/internal/cli"
	"github.com/repool/repool/internal/store/open"
	"github.com/repool/repool/internal/store/postgres"
)

const switchoverUsage = `usage: ` + Prog + ` switchover --to NAME [--group NAME] [--timeout DURATION] [--store URL | --config FILE]

Hand the leadership of an active/standby group to the standby named NAME
(its --ha-name), and wait until it leads. The active server stops taking
calls (a sidecar retries them through HAProxy), finishes the calls in
progress, writes its last checkpoint, gives up the leader lock and stands
by again; NAME, waiting for the lock, takes it at once; the other standbys
leave it to NAME. It finds the group's PostgreSQL store as "` + Prog + ` run"
does (--store, REPOOL_STORE, the --config file). Refused, changing
nothing, when the group has no active server, when NAME leads already,
and when NAME is not standing by (the standbys waiting are named). If NAME
has not taken over within --timeout the request is withdrawn and the group
elects as it would have.
`

// switchover is "server switchover": a directed switchover through the
// group's store (postgres.Switchover).
func switchover(ctx context.Context, args []string, env Env) error {
	fs := flag.NewFlagSet(Prog+" switchover", flag.ContinueOnError)
	fs.Usage = cli.Usage(fs, switchoverUsage)
	to := fs.String("to", "", "the `name` (--ha-name) of the standby to hand leadership to (required)")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for it to lead before the request is withdrawn")
	var storeURL, group string
	err := cli.Parse(fs, env.Stdout, env.Stderr, func() error {
		cfg, err := loadOwn(fs, args, env.Getenv, "store", "group")
		storeURL, group = cfg.Store, cfg.Group
		return err
	})
	if err != nil {
		return err
	}
	if *to == "" {
		return fmt.Errorf("switchover: --to is required: the --ha-name of the standby to hand leadership to")
	}
	if *timeout <= 0 {
		return fmt.Errorf("switchover: --timeout %v: want a positive duration", *timeout)
	}
	u, err := open.ParseURL(storeURL)
	if err != nil {
		return err
	}
	if u.Kind != open.Postgres {
		return fmt.Errorf("switchover: the store %s is not PostgreSQL: only an active/standby group (--ha, on PostgreSQL) has leadership to hand over", u.Redacted())
	}
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		return fmt.Errorf("switchover: connecting to the store %s: %w", u.Redacted(), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	from, took, err := postgres.Switchover(ctx, conn, group, *to, *timeout, func(line string) { fmt.Fprintln(env.Stderr, line) })
	if err != nil {
		return fmt.Errorf("switchover: %w", err)
	}
	fmt.Fprintf(env.Stdout, "group %s: %s is active (was %s), %.3f s after the request\n", group, *to, from, took.Seconds())
	return nil
}
