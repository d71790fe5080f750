package sqlstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/repool/repool/internal/store"
)

// probeCounter names the row ProbeWrite writes for group: "write_probe"
// for the default group, "write_probe:GROUP" for another, beside the
// group's epoch counter in server_counters. Nothing reads it; its name
// does not match the epoch counters that GroupList and BumpEpoch read.
func probeCounter(group string) string {
	return "write_probe" + strings.TrimPrefix(store.EpochCounter(group), "epoch")
}

// ProbeWrite implements store.WriteProber: it adds one to the group's
// probe counter, outside any transaction and unfenced, so that it takes no
// lock a fenced write waits for. A database that refuses writes (a
// read-only transaction, a full disk) fails it as it fails every write.
func (s *Store) ProbeWrite(ctx context.Context) error {
	if s.c.Options.ReadOnly {
		return fmt.Errorf("probe write: %w: the store is open read-only", store.ErrInvalid)
	}
	if _, err := s.c.Write.Exec(ctx, `
INSERT INTO server_counters AS c (name, value) VALUES ($1, 1)
ON CONFLICT (name) DO UPDATE SET value = c.value + 1`, probeCounter(s.c.Options.Group)); err != nil {
		return fmt.Errorf("probe write: %w", s.classify(err))
	}
	return nil
}
