package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/store"
)

// claimRetry is the time between two tries of a held writer claim.
const claimRetry = 100 * time.Millisecond

// claimStore takes the store's writer claim. While another process holds
// it (store.ErrLocked) it tries again every claimRetry for up to wait —
// the PostgreSQL session or the SQLite lock of a server killed a moment
// ago outlives it by a few seconds — logging once when it starts waiting,
// with the holder, and once when it has the claim. Then it gives up with
// the holder's error, saying how long it waited. Any other error ends it
// at once.
func claimStore(ctx context.Context, wl store.WriterLock, wait time.Duration, clk clock.Clock, log *slog.Logger) (store.Claim, error) {
	start := clk.Now()
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for waited := false; ; waited = true {
		c, err := wl.LockWriter(ctx)
		switch {
		case err == nil:
			if waited {
				log.Info("store claimed after waiting for its previous holder", "waited", clk.Now().Sub(start).Round(time.Millisecond))
			}
			return c, nil
		case !errors.Is(err, store.ErrLocked):
			return nil, err
		case !waited:
			log.Warn("store in use: waiting for it to be free", "for_up_to", wait, "held", err)
		}
		left := wait - clk.Now().Sub(start)
		if left <= 0 {
			return nil, fmt.Errorf("%w (waited %v for it, --store-lock-wait)", err, wait)
		}
		d := min(claimRetry, left)
		if timer == nil {
			timer = clk.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (gave up waiting: %v)", err, ctx.Err())
		case <-timer.Chan():
		}
	}
}
