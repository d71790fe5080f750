package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	repoolv1 "github.com/repool/repool/api/repool/v1"
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
	_, ok = w.(http.Flusher)
	if !ok {
		writeAnswer(w, answer{status: http.StatusInternalServerError, code: codeInternal, msg: "this connection cannot stream"})
		return
	}
	// The stream outlives the server's write_timeout: each send below sets
	// a write deadline of its own. (read_timeout ends once the request has
	// been read: the server clears it.)
	rc := http.NewResponseController(w)

	// The stream ends with the request, the provider's removal or the
	// sidecar's shutdown.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	unwatch := context.AfterFunc(a.stopping, cancel)
	defer unwatch()
	watched := make(chan struct{})
	go func() { // ends with ctx at the latest
		defer close(watched)
		select {
		case <-h.Retired:
			cancel()
		case <-ctx.Done():
		}
		// Interrupt soon a write that waits for a client that stopped
		// reading, leaving the end of the body time to go out.
		_ = rc.SetWriteDeadline(time.Now().Add(streamEndGrace))
	}()
	// The deadline is set before the handler returns, never on the
	// connection's next request (the server clears it after this one).
	defer func() { cancel(); <-watched }()

	stream, err := h.Provider.Subscribe(ctx, req)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	type result struct {
		ev  *repoolv1.Event
		err error
	}
	recv := make(chan result)
	done := make(chan struct{})
	go func() { // ends when the stream does; the handler waits for it
		defer close(done)
		for {
			ev, err := stream.Recv()
			select {
			case recv <- result{ev, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() { cancel(); <-done }()

	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	// send writes and flushes one message, and reports whether the client
	// took it in time.
	send := func(format string, args ...any) bool {
		if ctx.Err() != nil {
			return false
		}
		_ = rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	w.WriteHeader(http.StatusOK)
	if !send(": subscribed\n\n") {
		return
	}

	tick := time.NewTicker(a.keepalive)
	defer tick.Stop()
	for {
		ok := true
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			ok = send(": keepalive\n\n")
		case res := <-recv:
			if res.err != nil {
				send("event: error\ndata: %s\n\n", mustMarshalError(classify(res.err)))
				return
			}
			raw, err := marshal.Marshal(res.ev) // like every other answer
			if err != nil {
				continue // cannot happen for a decoded message
			}
			if name := eventName(res.ev); name == "gap" {
				ok = send("event: gap\ndata: %s\n\n", raw)
			} else {
				ok = send("id: %d\nevent: %s\ndata: %s\n\n", res.ev.GetSeq(), name, raw)
			}
		}
		if !ok {
			return
		}
	}
}

// eventWriteTimeout bounds each write of an event stream: a client that
// takes no data for this long is cut off. Once the stream has ended (the
// request, the provider's removal, the sidecar's shutdown), what is still
// being written gets streamEndGrace.
const (
	eventWriteTimeout = 10 * time.Second
	streamEndGrace    = time.Second
)
