package control

import (
	"context"
	"testing"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/postgres"
	"github.com/repool/repool/internal/testenv"
)

// The route × role matrix once more on a real PostgreSQL: status codes,
// scope before existence and "refused before the store" must not depend
// on the store implementation.
func TestRouteRoleMatrixPostgres(t *testing.T) {
	runMatrix(t, func(t *testing.T, clk clock.Clock) store.Store {
		t.Helper()
		st, err := postgres.Open(context.Background(), testenv.Postgres(t), store.Options{Clock: clk})
		if err != nil {
			t.Fatalf("postgres.Open() = got error %v, want nil", err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	})
}
