package topology

import (
	"context"
	"errors"
	"fmt"

	"github.com/repool/repool/internal/pgcluster"
)

// Postgres is a throwaway PostgreSQL cluster on a free port of 127.0.0.1,
// for the servers' HA mode: see pgcluster.Cluster (a child of this process,
// as the postgres OS user when this process is root, fsync off, in a
// temporary directory that Close removes). Safe for concurrent use.
type Postgres = pgcluster.Cluster

// PostgresBinDir returns the directory with the newest installed initdb and
// postgres, or "" if PostgreSQL is not installed.
func PostgresBinDir() string { return pgcluster.BinDir() }

// StartPostgres runs initdb in a new temporary directory and starts the
// newest installed server. Call Close to stop it.
func StartPostgres(ctx context.Context) (*Postgres, error) {
	pg, err := pgcluster.Start(ctx, pgcluster.Config{DirPrefix: "repool-loadtest-pg-"})
	if errors.Is(err, pgcluster.ErrNotInstalled) {
		return nil, fmt.Errorf("postgres: %w (apt-get install postgresql)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return pg, nil
}
