package postgres

import (
	"testing"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/storetest"
	"github.com/repool/repool/internal/testenv"
)

func BenchmarkCRUD(b *testing.B) {
	storetest.BenchmarkCRUD(b, openTest(b, testenv.Postgres(b), store.Options{}))
}
