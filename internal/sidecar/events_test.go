package sidecar_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/fakeserver"
	"github.com/repool/repool/internal/testenv"
)

// tickerClock is a fake clock that reports the period of every ticker made
// from it.
type tickerClock struct {
	*clock.Fake
	tickers chan time.Duration
}

func (c tickerClock) NewTicker(d time.Duration) clock.Ticker {
	t := c.Fake.NewTicker(d)
	select {
	case c.tickers <- d:
	default:
	}
	return t
}

// streamGoroutines counts the goroutines of event streams: handlers and
// what they started.
func streamGoroutines() int {
	buf := make([]byte, 1<<22)
	stacks := string(buf[:runtime.Stack(buf, true)])
	return strings.Count(stacks, "httpapi.(*API).events(") + strings.Count(stacks, "httpapi.(*eventStream).")
}

// TestEventStreamOnTheClock: an event stream's keep-alive comments are a
// ticker of the sidecar's clock (nothing comes before the clock passes the
// interval, one comes when it does), and the stream's end leaves none of
// its goroutines behind.
func TestEventStreamOnTheClock(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{})
	const keepalive = time.Hour
	clk := tickerClock{clock.NewFake(time.Now()), make(chan time.Duration, 16)}
	h := start(t, one("p", fast(fake)), sidecar.Options{Clock: clk, Keepalive: keepalive})
	es := openEvents(t, h, "p")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for d := time.Duration(0); d != keepalive; {
		select {
		case d = <-clk.tickers:
		case <-ctx.Done():
			t.Fatal("the event stream made no keep-alive ticker on the sidecar's clock")
		}
	}
	clk.Advance(keepalive - time.Second)
	if n := es.keepalives.Load(); n != 0 {
		t.Fatalf("%d keep-alives before the clock passed the interval, want none", n)
	}
	clk.Advance(time.Second)
	testenv.Eventually(t, 5*time.Second, "a keep-alive once the clock passed the interval", func() bool { return es.keepalives.Load() == 1 })
	es.body.Close()
	<-es.done
	testenv.Eventually(t, 5*time.Second, "the event stream's goroutines to end", func() bool { return streamGoroutines() == 0 })
}
