package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/sidecar/provider"
)

// eventName is the SSE event name of a kind: "registered", "blocked",
// "recovered", "lease_expired", "removed"; the server's resume-gap marker
// is "gap".
func eventName(e *repoolv1.Event) string {
	if e.GetKind() == repoolv1.EventKind_EVENT_KIND_UNSPECIFIED {
		return "gap"
	}
	return strings.ToLower(strings.TrimPrefix(e.GetKind().String(), "EVENT_KIND_"))
}

// parseKinds reads ?kinds=blocked,recovered (names as in eventName, or the
// enum names, in any letter case). Names are ASCII: strings.ToUpper alone
// would also take look-alikes such as "lea\u017fe_expired" (ſ upper-cases
// to S).
func parseKinds(q string) ([]repoolv1.EventKind, error) {
	var kinds []repoolv1.EventKind
	for _, name := range strings.Split(q, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		ascii := strings.IndexFunc(name, func(r rune) bool { return r >= utf8.RuneSelf }) < 0
		v, ok := repoolv1.EventKind_value[strings.ToUpper(name)]
		if !ok {
			v, ok = repoolv1.EventKind_value["EVENT_KIND_"+strings.ToUpper(name)]
		}
		ok = ok && ascii
		if !ok || v == int32(repoolv1.EventKind_EVENT_KIND_UNSPECIFIED) {
			return nil, badRequest("kinds: unknown event kind %s; want registered, blocked, recovered, lease_expired or removed", jsonQuote(name))
		}
		kinds = append(kinds, repoolv1.EventKind(v))
	}
	return kinds, nil
}

// eventsRequest builds the subscription: kinds from ?kinds=, and the resume
// point from the Last-Event-ID header (what EventSource sends on
// reconnect) or else ?after_seq=.
func eventsRequest(r *http.Request) (*repoolv1.SubscribeEventsRequest, error) {
	kinds, err := parseKinds(r.URL.Query().Get("kinds"))
	if err != nil {
		return nil, err
	}
	req := &repoolv1.SubscribeEventsRequest{Kinds: kinds}
	after, field := r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	if after == "" {
		after, field = r.URL.Query().Get("after_seq"), "after_seq"
	}
	if after != "" {
		n, err := strconv.ParseUint(after, 10, 64)
		if err != nil {
			return nil, badRequest("%s %s: want an event sequence number", field, jsonQuote(after))
		}
		req.AfterSeq = n
	}
	return req, nil
}

// events streams the provider's events as server-sent events:
//
//	id: <seq>
//	event: <kind>
//	data: <the event as JSON>
//
// The resume-gap marker is sent as "event: gap" without an id, so that a
// client's Last-Event-ID stays the last event it really got. A stream that
// ends with an error sends it as "event: error" (the error JSON) first.
// Comment lines keep idle connections open. A client that stops reading
// does not hold the stream (and a removed provider's connection) open:
// each write must finish within eventWriteTimeout, and the end of the
// stream cuts a write in progress short.
func (a *API) events(w http.ResponseWriter, r *http.Request) {
	h, ok := a.lookup(w, r)
	if !ok {
		return
	}
	defer h.Release()
	req, err := eventsRequest(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if _, ok := w.(http.Flusher); !ok {
		writeAnswer(w, answer{status: http.StatusInternalServerError, code: codeInternal, msg: "this connection cannot stream"})
		return
	}
	s := a.newEventStream(w, r, h.Retired)
	defer s.close()
	sub, err := h.Provider.Subscribe(s.ctx, req)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	s.serve(sub)
}

// eventStream is one request's event stream. It has one lifetime: ctx,
// which ends with the request, the provider's removal or the sidecar's
// shutdown, and close, which ends ctx and returns once every goroutine the
// stream started has returned.
type eventStream struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	clock     clock.Clock
	keepalive time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the goroutines started by spawn
}

// newEventStream starts the lifetime of a stream on w. retired is closed
// when the provider is removed.
func (a *API) newEventStream(w http.ResponseWriter, r *http.Request, retired <-chan struct{}) *eventStream {
	// The stream outlives the server's write_timeout: each send sets a
	// write deadline of its own. (read_timeout ends once the request has
	// been read: the server clears it.)
	s := &eventStream{w: w, rc: http.NewResponseController(w), clock: a.clock, keepalive: a.keepalive}
	s.ctx, s.cancel = context.WithCancel(r.Context())
	s.spawn(func() {
		select {
		case <-retired:
		case <-a.stopping.Done():
		case <-s.ctx.Done():
		}
		s.cancel()
		// Interrupt soon a write that waits for a client that stopped
		// reading, leaving the end of the body time to go out. The
		// deadline is the connection's, on the wall clock; it is set
		// before close returns, never on the connection's next request
		// (the server clears it after this one).
		_ = s.rc.SetWriteDeadline(time.Now().Add(streamEndGrace))
	})
	return s
}

// spawn runs f in a goroutine that close waits for; f must return once
// s.ctx ends.
func (s *eventStream) spawn(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// close ends the stream's lifetime and waits for its goroutines.
func (s *eventStream) close() {
	s.cancel()
	s.wg.Wait()
}

// eventOrError is what the subscription's receiver hands the writer.
type eventOrError struct {
	ev  *repoolv1.Event
	err error
}

// receive hands every event of sub, and then its error, to recv, until
// the stream ends.
func (s *eventStream) receive(sub *provider.EventStream, recv chan<- eventOrError) {
	for {
		ev, err := sub.Recv()
		select {
		case recv <- eventOrError{ev, err}:
		case <-s.ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// serve writes the stream's head, then its events and keep-alive comments,
// until the subscription fails, the client stops taking them or the
// stream ends.
func (s *eventStream) serve(sub *provider.EventStream) {
	recv := make(chan eventOrError)
	s.spawn(func() { s.receive(sub, recv) })
	hd := s.w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	if !s.send(": subscribed\n\n") {
		return
	}
	tick := s.clock.NewTicker(s.keepalive)
	defer tick.Stop()
	for {
		ok := true
		select {
		case <-s.ctx.Done():
			return
		case <-tick.Chan():
			ok = s.send(": keepalive\n\n")
		case res := <-recv:
			if res.err != nil {
				s.send("event: error\ndata: %s\n\n", mustMarshalError(classify(res.err)))
				return
			}
			raw, err := marshal.Marshal(res.ev) // like every other answer
			if err != nil {
				continue // cannot happen for a decoded message
			}
			if name := eventName(res.ev); name == "gap" {
				ok = s.send("event: gap\ndata: %s\n\n", raw)
			} else {
				ok = s.send("id: %d\nevent: %s\ndata: %s\n\n", res.ev.GetSeq(), name, raw)
			}
		}
		if !ok {
			return
		}
	}
}

// send writes and flushes one message, and reports whether the client took
// it in time (a write deadline on the connection, hence the wall clock).
func (s *eventStream) send(format string, args ...any) bool {
	if s.ctx.Err() != nil {
		return false
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
	if _, err := fmt.Fprintf(s.w, format, args...); err != nil {
		return false
	}
	return s.rc.Flush() == nil
}

// eventWriteTimeout bounds each write of an event stream: a client that
// takes no data for this long is cut off. Once the stream has ended (the
// request, the provider's removal, the sidecar's shutdown), what is still
// being written gets streamEndGrace.
const (
	eventWriteTimeout = 10 * time.Second
	streamEndGrace    = time.Second
)
