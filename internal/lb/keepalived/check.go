package keepalived

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// CheckTimeout bounds one answer of HAProxy's monitor in the track script.
const CheckTimeout = 500 * time.Millisecond

// Check is the track script's check of this host's HAProxy: it asks URL
// (the monitor-uri) every Every until For has passed, and fails at the
// first answer other than 200, the first connection that fails and the
// first answer that takes longer than Timeout. keepalived runs it once
// per track interval; a failure ends the run at once, so keepalived
// learns of it within Every of the monitor failing, not at the next run.
type Check struct {
	URL     string
	For     time.Duration
	Every   time.Duration
	Timeout time.Duration

	// Client asks URL; nil: a client with keep-alive (one connection for
	// the whole run).
	Client *http.Client
	// Clock is real time if nil.
	Clock Clock
}

// Clock is the time Check runs on.
type Clock interface {
	Now() time.Time
	// Sleep waits d or until ctx ends, and returns ctx's error then.
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ErrCheck is wrapped by every failed check.
var ErrCheck = errors.New("HAProxy's monitor failed")

// Run checks until c.For has passed (nil) or a check fails (an error
// wrapping ErrCheck), or ctx ends (its error).
func (c Check) Run(ctx context.Context) error {
	if c.URL == "" || c.For < 0 || c.Every <= 0 || c.Timeout <= 0 {
		return fmt.Errorf("keepalived check: want a URL, --for >= 0, --every and --timeout > 0 (got %q, %v, %v, %v)", c.URL, c.For, c.Every, c.Timeout)
	}
	clock := c.Clock
	if clock == nil {
		clock = realClock{}
	}
	client := c.Client
	if client == nil {
		client = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1}}
		defer client.CloseIdleConnections()
	}
	end := clock.Now().Add(c.For)
	for n := 1; ; n++ {
		if err := c.once(ctx, client); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w: check %d: %w", ErrCheck, n, err)
		}
		if !clock.Now().Add(c.Every).Before(end) {
			return nil
		}
		if err := clock.Sleep(ctx, c.Every); err != nil {
			return err
		}
	}
}

// once asks URL once.
func (c Check) once(ctx context.Context, client *http.Client) error {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", c.URL, resp.Status)
	}
	return nil
}
