package pool

import (
	"errors"
	"sync"
	"time"
)

// EventKind says what an Event reports.
type EventKind uint8

// Event kinds. EventGap is a marker sent to a resuming subscriber when the
// events it asked for are no longer held.
const (
	EventRegistered EventKind = iota + 1
	EventBlocked
	EventRecovered
	EventLeaseExpired
	EventRemoved
	EventGap
	// EventRetired: the resource reached its MaxUses or MaxAge (Detail
	// says which) and is never leased again.
	EventRetired
	// EventCapped: a quarantine would have put more of the pool than
	// MaxQuarantinedShare in quarantine, so the least bad of the
	// quarantined resources (Resource; Context empty for a whole
	// quarantine) was taken out of quarantine to be served again.
	EventCapped
)

// String returns the kind's lower-case name.
func (k EventKind) String() string {
	switch k {
	case EventRegistered:
		return "registered"
	case EventBlocked:
		return "blocked"
	case EventRecovered:
		return "recovered"
	case EventLeaseExpired:
		return "lease_expired"
	case EventRemoved:
		return "removed"
	case EventGap:
		return "gap"
	case EventRetired:
		return "retired"
	case EventCapped:
		return "quarantine_capped"
	}
	return "unknown"
}

// Kinds is a set of event kinds; the zero value means every kind.
type Kinds uint16

// KindsOf returns the set holding ks.
func KindsOf(ks ...EventKind) Kinds {
	var s Kinds
	for _, k := range ks {
		s |= 1 << k
	}
	return s
}

// Has reports whether k is in the set (always true for the empty set).
func (s Kinds) Has(k EventKind) bool { return s == 0 || s&(1<<k) != 0 }

// Event is something that happened in a pool. Seq numbers increase by one
// per event of a pool.
type Event struct {
	Seq      uint64
	Kind     EventKind
	Resource string
	// Context is empty when the event concerns the whole resource.
	Context string
	At      time.Time
	Detail  string
}

// ErrSlowSubscriber is the reason a subscription ends when its buffer filled.
var ErrSlowSubscriber = errors.New("subscriber too slow: events dropped")

// ErrClosed is the reason a subscription ends when the pool or the caller
// closed it.
var ErrClosed = errors.New("subscription closed")

// Subscription receives a pool's events on C until it ends. C is closed when
// it ends; Err then says why. Close is safe to call more than once and from
// any goroutine.
type Subscription struct {
	// C delivers events in Seq order.
	C <-chan Event

	c     chan Event
	kinds Kinds
	bus   *bus
	err   error // guarded by bus.mu
}

// Close ends the subscription; later events are not delivered.
func (s *Subscription) Close() { s.bus.remove(s, ErrClosed) }

// Err says why the subscription ended, or nil while it is live.
func (s *Subscription) Err() error {
	s.bus.mu.Lock()
	defer s.bus.mu.Unlock()
	return s.err
}

// bus fans events out to subscribers through bounded buffers and keeps a
// ring of recent events for resuming subscribers. It has its own lock so that
// a subscriber closing never waits for the pool.
type bus struct {
	mu      sync.Mutex
	shutBy  error // set: subscriptions end at once, with it
	subs    map[*Subscription]struct{}
	ring    []Event // ring[seq % len] for the last len events
	seq     uint64  // last sequence number used
	buf     int
	dropped uint64 // subscribers disconnected for being slow
}

func newBus(buf, history int) *bus {
	return &bus{subs: map[*Subscription]struct{}{}, ring: make([]Event, history), buf: buf}
}

// publish stamps e with the next sequence number and offers it to every
// subscriber without blocking.
func (b *bus) publish(e Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	e.Seq = b.seq
	b.ring[b.seq%uint64(len(b.ring))] = e
	for s := range b.subs {
		if !s.kinds.Has(e.Kind) {
			continue
		}
		select {
		case s.c <- e:
		default:
			b.dropped++
			b.removeLocked(s, ErrSlowSubscriber)
		}
	}
}

// subscribe registers a subscriber; while the bus is shut, the
// subscription it returns has already ended. With after > 0 it first
// receives the held events with a larger Seq, preceded by an EventGap
// marker when some of them are no longer held, or when after is beyond the
// last event: the subscriber saw events of an earlier pool (before a
// restart or failover, which number events from 1 again), and what came
// since is unknown.
func (b *bus) subscribe(kinds Kinds, after uint64, now time.Time) *Subscription {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.shutBy != nil {
		c := make(chan Event)
		close(c)
		return &Subscription{C: c, c: c, kinds: kinds, bus: b, err: b.shutBy}
	}
	var backlog []Event
	if after > b.seq {
		backlog = append(backlog, Event{Kind: EventGap, At: now, Detail: "gap"})
	}
	if after > 0 && after < b.seq {
		oldest := uint64(1)
		if b.seq > uint64(len(b.ring)) {
			oldest = b.seq - uint64(len(b.ring)) + 1
		}
		if after+1 < oldest {
			backlog = append(backlog, Event{Kind: EventGap, At: now, Detail: "gap"})
			after = oldest - 1
		}
		for seq := after + 1; seq <= b.seq; seq++ {
			if e := b.ring[seq%uint64(len(b.ring))]; kinds.Has(e.Kind) {
				backlog = append(backlog, e)
			}
		}
	}
	c := make(chan Event, b.buf+len(backlog))
	for _, e := range backlog {
		c <- e
	}
	s := &Subscription{C: c, c: c, kinds: kinds, bus: b}
	b.subs[s] = struct{}{}
	return s
}

func (b *bus) remove(s *Subscription, why error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.removeLocked(s, why)
}

func (b *bus) removeLocked(s *Subscription, why error) {
	if _, ok := b.subs[s]; !ok {
		return
	}
	delete(b.subs, s)
	s.err = why
	close(s.c)
}

// shut ends every subscription with why, and every later one at once,
// until reopen.
func (b *bus) shut(why error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.shutBy = why
	for s := range b.subs {
		b.removeLocked(s, why)
	}
}

func (b *bus) reopen() {
	b.mu.Lock()
	b.shutBy = nil
	b.mu.Unlock()
}

func (b *bus) stats() (subscribers int, dropped, seq uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs), b.dropped, b.seq
}
