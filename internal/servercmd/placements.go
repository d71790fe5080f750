package servercmd

import (
	"context"
	"fmt"

	"github.com/repool/repool/internal/lb/tenantmap"
	"github.com/repool/repool/internal/store"
)

// openPlacements is lb's placement source for "haproxy sync-placements":
// the server's store (its --store URL), opened read-only, so that the
// front end's map follows the tenants' placements without being able to
// change anything. A PostgreSQL store also gives a fingerprint, which
// spares an unchanged tick the listing.
func openPlacements(ctx context.Context, url string) (tenantmap.Source, func() error, error) {
	st, err := openServerStore(ctx, url)
	if err != nil {
		return nil, nil, err
	}
	src, ok := st.(tenantmap.Source)
	if _, groups := st.(store.Groups); !ok || !groups {
		st.Close()
		return nil, nil, fmt.Errorf("store %s does not keep tenants' placements", url)
	}
	return src, st.Close, nil
}
