package open

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestStore(t *testing.T) {
	pg := testenv.Postgres(t)
	tests := []struct {
		name     string
		url      string
		wantType string
		wantErr  error
	}{
		{name: "sqlite file", url: "sqlite:" + filepath.Join(t.TempDir(), "a.db"), wantType: "*sqlite.Store"},
		{name: "sqlite double slash", url: "sqlite://" + filepath.Join(t.TempDir(), "b.db"), wantType: "*sqlite.Store"},
		{name: "sqlite memory", url: "sqlite::memory:", wantType: "*sqlite.Store"},
		{name: "postgres", url: pg, wantType: "*postgres.Store"},
		{name: "postgresql", url: strings.Replace(testenv.Postgres(t), "postgres://", "postgresql://", 1), wantType: "*postgres.Store"},
		{name: "empty", url: "", wantErr: store.ErrInvalid},
		{name: "sqlite without path", url: "sqlite:", wantErr: store.ErrInvalid},
		{name: "mysql", url: "mysql://u@h/db", wantErr: store.ErrInvalid},
		{name: "bare path", url: "./data/repool.db", wantErr: store.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Store(t.Context(), tc.url, store.Options{})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Store(ctx, %q) = got error %v, want %v", tc.url, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Store(ctx, %q) = got error %v, want nil", tc.url, err)
			}
			defer s.Close()
			if got := fmt.Sprintf("%T", s); got != tc.wantType {
				t.Fatalf("Store(ctx, %q) = got a %s, want a %s", tc.url, got, tc.wantType)
			}
			if _, err := s.CreateTenant(t.Context(), store.Tenant{ID: "demo"}); err != nil {
				t.Fatalf("CreateTenant(ctx, demo) on %s = got error %v, want nil (migrations applied)", tc.name, err)
			}
		})
	}
}

func TestStoreHidesPassword(t *testing.T) {
	url := "postgres://repool:s3cret-pw@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"
	_, err := Store(t.Context(), url, store.Options{})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Store(ctx, unreachable) = got error %v, want ErrUnavailable", err)
	}
	if strings.Contains(err.Error(), "s3cret-pw") {
		t.Fatalf("Store(ctx, unreachable) = got error %q, want no password in it", err)
	}
}
