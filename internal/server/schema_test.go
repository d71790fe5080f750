package server

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/testenv"
)

// TestServerRunsOnANewerAdditiveSchema is the schema rule of a rolling
// upgrade (docs/ha.md, Day-2 operations): the first upgraded server
// migrates the schema and the servers not yet upgraded keep running on
// it, which holds while every migration only adds tables and columns.
// Here a newer release's migration is played on a store this build
// created — a column on two tables, a new table, its version in goose's
// table — and this build, started again on it, must serve, change limits
// and restore as before, and leave the newer version recorded.
func TestServerRunsOnANewerAdditiveSchema(t *testing.T) {
	type schemaCase struct {
		name    string
		store   string // the server's --store
		driver  string // database/sql driver and DSN of the same database
		dsn     string
		applied string // goose_db_version.is_applied's true
	}
	sqlite, pg := sqliteStore(t), testenv.Postgres(t)
	for _, tc := range []schemaCase{
		{"sqlite", sqlite, "sqlite", strings.TrimPrefix(sqlite, "sqlite:"), "1"},
		{"postgres", pg, "pgx", pg, "true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := start(t, Config{Store: tc.store})
			ctx := withKey(r.key)
			if _, err := r.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "a", Capacity: 1}}}); err != nil {
				t.Fatal(err)
			}
			key, op := r.key, r.op
			r.stop(t)

			db, err := sql.Open(tc.driver, tc.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			for _, stmt := range []string{
				"ALTER TABLE tenant_limits ADD COLUMN max_future_things BIGINT",
				"ALTER TABLE resources ADD COLUMN future_note TEXT",
				"CREATE TABLE future_things (tenant_id TEXT NOT NULL, id TEXT NOT NULL, PRIMARY KEY (tenant_id, id))",
				"INSERT INTO goose_db_version (version_id, is_applied) VALUES (9999, " + tc.applied + ")",
			} {
				if _, err := db.ExecContext(context.Background(), stmt); err != nil {
					t.Fatalf("the newer release's migration: %s = got error %v, want nil", stmt, err)
				}
			}

			r = start(t, Config{Store: tc.store})
			r.key, r.op = key, op
			ctx = withKey(r.key)
			acq, err := r.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
			if err != nil {
				t.Fatalf("Acquire on the newer schema = got error %v, want a lease of a", err)
			}
			if _, err := r.pool.Report(ctx, &repoolv1.ReportRequest{ResourceId: "a", Context: "x", Outcome: repoolv1.Outcome_SUCCESS, LeaseId: acq.GetLease().GetLeaseId(), FencingToken: acq.GetLease().GetFencingToken()}); err != nil {
				t.Fatal(err)
			}
			if _, err := r.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "b"}}}); err != nil {
				t.Fatal(err)
			}
			if code := r.api(t, "PUT", "/api/v1/tenants/demo/limits", r.op, `{"max_streams":3}`, nil); code != 200 {
				t.Fatalf("PUT limits on the newer schema = %d, want 200", code)
			}
			r.stop(t) // checkpoints

			r = start(t, Config{Store: tc.store})
			r.key, r.op = key, op
			ctx = withKey(r.key)
			res, err := r.pool.ListResources(ctx, &repoolv1.ListResourcesRequest{})
			if err != nil || len(res.GetResources()) != 2 {
				t.Fatalf("ListResources after a restart on the newer schema = %v, %v; want a and b", res, err)
			}
			var lim struct {
				Effective struct {
					MaxStreams int `json:"max_streams"`
				} `json:"effective"`
			}
			if code := r.api(t, "GET", "/api/v1/tenants/demo/limits", r.op, "", &lim); code != 200 || lim.Effective.MaxStreams != 3 {
				t.Fatalf("GET limits after a restart on the newer schema = %d, max_streams %d; want 200, 3", code, lim.Effective.MaxStreams)
			}
			var v int64
			if err := db.QueryRowContext(context.Background(), "SELECT MAX(version_id) FROM goose_db_version").Scan(&v); err != nil || v != 9999 {
				t.Fatalf("schema version after this build ran = %d, %v; want the newer 9999 still recorded", v, err)
			}
		})
	}
}
