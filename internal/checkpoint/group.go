package checkpoint

import (
	"context"
	"sync"

	"github.com/repool/repool/internal/store"
)

// change is what one caller of Persist or Sync asks a group commit for.
type change struct {
	resources []store.ResourceRow // registered (Persist)
	removed   []string            // deregistered (Persist)
	sync      bool                // the pool's changes so far (Sync)
	done      chan error
}

// group is one tenant's group commit: callers that arrive while a write is
// in flight are answered together by the next write, which starts after
// they came. A goroutine runs while callers wait and ends when none does.
type group struct {
	write func(batch []change) error

	mu      sync.Mutex
	running bool     // a goroutine is writing and will look at next again
	next    []change // callers waiting for the next write
}

// wait queues ch and returns the outcome of the write that took it, or
// ctx's error if ctx ends first (the write still happens).
func (g *group) wait(ctx context.Context, ch change) error {
	ch.done = make(chan error, 1)
	g.mu.Lock()
	g.next = append(g.next, ch)
	if !g.running {
		g.running = true
		go g.run()
	}
	g.mu.Unlock()
	select {
	case err := <-ch.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *group) run() {
	for {
		g.mu.Lock()
		batch := g.next
		g.next = nil
		if len(batch) == 0 {
			g.running = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		err := g.write(batch)
		for _, ch := range batch {
			ch.done <- err
		}
	}
}
