package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

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
// enum names).
func parseKinds(q string) ([]repoolv1.EventKind, error) {
	var kinds []repoolv1.EventKind
	for _, name := range strings.Split(q, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		v, ok := repoolv1.EventKind_value[strings.ToUpper(name)]
		if !ok {
			v, ok = repoolv1.EventKind_value["EVENT_KIND_"+strings.ToUpper(name)]
		}
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
// Comment lines keep idle connections open.
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
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeAnswer(w, answer{status: http.StatusInternalServerError, code: codeInternal, msg: "this connection cannot stream"})
		return
	}

	// The stream ends with the request, the provider's removal or the
	// sidecar's shutdown.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	unwatch := context.AfterFunc(a.stopping, cancel)
	defer unwatch()
	go func() { // ends with ctx at the latest
		select {
		case <-h.Retired:
			cancel()
		case <-ctx.Done():
		}
	}()

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
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": subscribed\n\n")
	flusher.Flush()

	tick := time.NewTicker(a.keepalive)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			fmt.Fprint(w, ": keepalive\n\n")
		case res := <-recv:
			if res.err != nil {
				if ctx.Err() == nil {
					ans := classify(res.err)
					raw := mustMarshalError(ans)
					fmt.Fprintf(w, "event: error\ndata: %s\n\n", raw)
				}
				flusher.Flush()
				return
			}
			raw, err := marshal.Marshal(res.ev) // like every other answer
			if err != nil {
				continue // cannot happen for a decoded message
			}
			if name := eventName(res.ev); name == "gap" {
				fmt.Fprintf(w, "event: gap\ndata: %s\n\n", raw)
			} else {
				fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", res.ev.GetSeq(), name, raw)
			}
		}
		flusher.Flush()
	}
}
