// Package leases carries a provider's Acquire, Release, Report and Renew
// calls on the server's Leases stream: a small pool of streams, each call
// sent on the stream with the fewest calls waiting and answered in the
// order sent. It is a repoolv1.PoolServiceClient (Client.With), so the
// provider's resilience layers (deadline, retries, breaker, attempt rules,
// bulkhead, token refresh) wrap a streamed call exactly as a unary one.
//
// The unary call is the fallback: when the server does not offer the
// stream (UNIMPLEMENTED) or refuses to open one (RESOURCE_EXHAUSTED: the
// tenant's max_lease_streams, its call budget or its rate limit) the calls
// sent on it, which the server did not read, are made as unary calls, and
// streams are not tried again for a while. A stream that breaks after
// answering calls (the connection lost, the server stepping down) answers
// the calls it has not answered with its error, as a unary call in flight
// would be answered; the provider's retrier retries them (UNAVAILABLE) and
// the next call opens a new stream. Every reply received is delivered:
// no acknowledged work is lost.
//
// A call's deadline and cancellation end its wait at once with the unary
// call's error (DEADLINE_EXCEEDED, CANCELED); a call not yet sent is not
// sent. The server has no per-call deadline on a stream and does the call
// all the same: a lease it grants to a call that gave up is released on the
// stream (a unary call cancelled after the server granted its lease leaves
// it to expire).
package leases

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/sidecar/token"
	"github.com/repool/repool/internal/tracing"
)

// DefaultStreams is the number of streams a Client opens at most: enough
// that the server, which does a stream's calls one at a time, has as many
// calls of this sidecar in its journal's batch as that batch's commit
// needs, and few enough that the sidecars of a tenant share its
// max_lease_streams (32 by default) four ways.
const DefaultStreams = 8

// fallbackFor is how long a Client makes unary calls after the server
// refused to open a stream.
const fallbackFor = 30 * time.Second

// maxWaiting is the calls a stream may have waiting for replies before the
// next call is made unary instead: far below what fills a stream's HTTP/2
// window (64 KiB by default on the server, calls of about 100 bytes), so
// that sending a call never waits for the window, which would hold the
// caller past its deadline while the server does not read.
const maxWaiting = 128

// idleAfter is how long a stream may go without a call before the next
// call opens a new one: under the server's grpc_max_stream_idle (1m by
// default), so that a call is not sent just as the server ends the stream
// for being idle.
const idleAfter = 20 * time.Second

// Client is a pool of Leases streams to one provider. Safe for concurrent
// use. Close ends its streams.
type Client struct {
	unary   repoolv1.PoolServiceClient
	streams []slot
	next    atomic.Uint32
	// unaryUntil (unix nanoseconds) is when streams may be tried again
	// after the server refused one.
	unaryUntil atomic.Int64
	closed     atomic.Bool
	streamed   atomic.Uint64 // calls answered on a stream
	fellBack   atomic.Uint64 // calls made unary because no stream took them
}

// slot holds one of the pool's streams (nil until needed). mu serialises
// the opening of its stream.
type slot struct {
	mu sync.Mutex
	s  atomic.Pointer[stream]
}

// New returns a Client that opens up to n streams (DefaultStreams when n
// is 0 or less) on unary's connection; unary also makes the fallback
// calls and every call the stream does not carry.
func New(unary repoolv1.PoolServiceClient, n int) *Client {
	if n <= 0 {
		n = DefaultStreams
	}
	return &Client{unary: unary, streams: make([]slot, n)}
}

// Close ends the Client's streams: each is half-closed, so the server
// answers the calls already sent; calls made after Close are unary.
func (c *Client) Close() {
	c.closed.Store(true)
	for i := range c.streams {
		sl := &c.streams[i]
		sl.mu.Lock()
		if s := sl.s.Swap(nil); s != nil {
			s.closeSend()
		}
		sl.mu.Unlock()
	}
}

// Counts returns the calls answered on a stream and the calls that fell
// back to unary calls since New.
func (c *Client) Counts() (streamed, unary uint64) {
	return c.streamed.Load(), c.fellBack.Load()
}

// With returns the PoolServiceClient whose Acquire, Release, Report and
// Renew go on a stream opened with tok (the credential of the call's
// attempt: a new token opens new streams); its other calls are unary.
func (c *Client) With(tok *token.Token) repoolv1.PoolServiceClient {
	return &bound{PoolServiceClient: c.unary, c: c, tok: tok}
}

// bound is a Client with the token of one attempt.
type bound struct {
	repoolv1.PoolServiceClient
	c   *Client
	tok *token.Token
}

func (b *bound) Acquire(ctx context.Context, req *repoolv1.AcquireRequest, opts ...grpc.CallOption) (*repoolv1.AcquireResponse, error) {
	r, err := b.c.do(ctx, b.tok, &repoolv1.LeaseCall{Call: &repoolv1.LeaseCall_Acquire{Acquire: req}}, opts)
	if errors.Is(err, errUnary) {
		return b.PoolServiceClient.Acquire(ctx, req, opts...)
	}
	if err != nil {
		return nil, err
	}
	return r.GetAcquire(), nil
}

func (b *bound) Release(ctx context.Context, req *repoolv1.ReleaseRequest, opts ...grpc.CallOption) (*repoolv1.ReleaseResponse, error) {
	r, err := b.c.do(ctx, b.tok, &repoolv1.LeaseCall{Call: &repoolv1.LeaseCall_Release{Release: req}}, opts)
	if errors.Is(err, errUnary) {
		return b.PoolServiceClient.Release(ctx, req, opts...)
	}
	if err != nil {
		return nil, err
	}
	return r.GetRelease(), nil
}

func (b *bound) Report(ctx context.Context, req *repoolv1.ReportRequest, opts ...grpc.CallOption) (*repoolv1.ReportResponse, error) {
	r, err := b.c.do(ctx, b.tok, &repoolv1.LeaseCall{Call: &repoolv1.LeaseCall_Report{Report: req}}, opts)
	if errors.Is(err, errUnary) {
		return b.PoolServiceClient.Report(ctx, req, opts...)
	}
	if err != nil {
		return nil, err
	}
	return r.GetReport(), nil
}

func (b *bound) Renew(ctx context.Context, req *repoolv1.RenewRequest, opts ...grpc.CallOption) (*repoolv1.RenewResponse, error) {
	r, err := b.c.do(ctx, b.tok, &repoolv1.LeaseCall{Call: &repoolv1.LeaseCall_Renew{Renew: req}}, opts)
	if errors.Is(err, errUnary) {
		return b.PoolServiceClient.Renew(ctx, req, opts...)
	}
	if err != nil {
		return nil, err
	}
	return r.GetRenew(), nil
}

// errUnary says that a call was not sent on a stream (no stream could
// take it, or the server refused the stream before reading it): the call
// is made as a unary call.
var errUnary = errors.New("leases: make the call unary")

// do sends call on a stream and returns its reply's response (a reply
// with an error is returned as the unary call's status error), or
// errUnary.
func (c *Client) do(ctx context.Context, tok *token.Token, call *repoolv1.LeaseCall, opts []grpc.CallOption) (*repoolv1.LeaseReply, error) {
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	if c.closed.Load() || time.Now().UnixNano() < c.unaryUntil.Load() {
		c.fellBack.Add(1)
		return nil, errUnary
	}
	call.Traceparent, call.Tracestate = tracing.Header(ctx)
	w := getWaiter()
	if !c.send(tok, call, w) {
		putWaiter(w)
		c.fellBack.Add(1)
		return nil, errUnary
	}
	select {
	case <-w.done:
	case <-ctx.Done():
		if w.state.CompareAndSwap(waiting, abandoned) {
			// The reply is the receiver's now (it releases a lease the
			// call was granted, and recycles w).
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		<-w.done // answered meanwhile
	}
	reply, err := w.reply, w.err
	putWaiter(w)
	switch {
	case errors.Is(err, errUnary):
		c.fellBack.Add(1)
		return nil, err
	case err != nil:
		return nil, err
	}
	c.streamed.Add(1)
	if e := reply.GetError(); e != nil {
		return nil, replyError(e, codes.Code(reply.GetStatus()), opts)
	}
	return reply, nil
}

// send puts call on the least busy of the pool's streams, opening one if
// its slot is empty, its stream ended, idle too long or opened with
// another token. It returns false when no stream took the call.
func (c *Client) send(tok *token.Token, call *repoolv1.LeaseCall, w *waiter) bool {
	for range 2 { // a stream that ends as the call is sent is replaced once
		s := c.pick(tok)
		if s == nil {
			return false
		}
		if s.send(call, w) {
			return true
		}
		if !s.answered() {
			// It ended before any reply: perhaps refused (no Leases, or
			// over the tenant's streams), which its receiver is about to
			// record as a reason to go unary for a while. Another stream
			// opened now would be refused too; this call goes unary.
			return false
		}
	}
	return false
}

// pick returns the stream for the next call: an open one without calls
// waiting, else a new one in an empty slot, else the one with fewest
// calls waiting (a stream does its calls one at a time); opened anew if
// it cannot take the call; nil if none could be opened.
func (c *Client) pick(tok *token.Token) *stream {
	n := uint32(len(c.streams))
	start := c.next.Add(1)
	best, empty, fewest := -1, -1, int32(1<<31-1)
	for i := range n {
		k := int((start + i) % n)
		s := c.streams[k].s.Load()
		if s == nil {
			if empty < 0 {
				empty = k
			}
			continue
		}
		if l := s.pending.Load(); l < fewest {
			best, fewest = k, l
			if l == 0 {
				break
			}
		}
	}
	if fewest > 0 && empty >= 0 {
		best = empty
	} else if fewest >= maxWaiting {
		return nil // every stream is backed up: the server is not reading
	}
	sl := &c.streams[best]
	if s := sl.s.Load(); s != nil && s.usable(tok) {
		return s
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	s := sl.s.Load()
	if s != nil && s.usable(tok) {
		return s // another call opened it meanwhile
	}
	if s != nil {
		s.closeSend()
	}
	s, err := c.open(tok)
	if err != nil {
		sl.s.Store(nil)
		return nil
	}
	sl.s.Store(s)
	return s
}

// open opens a stream with tok's credential and starts its receiver.
func (c *Client) open(tok *token.Token) (*stream, error) {
	ctx, cancel := context.WithCancel(context.Background())
	bs, err := c.unary.Leases(tok.Outgoing(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	s := &stream{c: c, tok: tok, bs: bs, cancel: cancel}
	s.last.Store(time.Now().UnixNano())
	go s.receive()
	return s, nil
}

// stream is one open Leases stream.
type stream struct {
	c       *Client
	tok     *token.Token
	bs      grpc.BidiStreamingClient[repoolv1.LeaseCall, repoolv1.LeaseReply]
	cancel  context.CancelFunc
	last    atomic.Int64 // unix nanoseconds of the last call sent
	pending atomic.Int32 // calls sent and not answered
	over    atomic.Bool  // ended or half-closed: takes no more calls

	mu      sync.Mutex // orders sends as the queue
	queue   []*waiter  // the calls sent and not answered, in order
	head    int
	err     error // set once the stream ended; queue is then empty
	half    bool  // CloseSend called
	replied bool  // a reply arrived
}

// usable tells whether the stream can take a call made with tok: it was
// opened with tok, it has not ended, and it is not idle for so long that
// the server may be ending it.
func (s *stream) usable(tok *token.Token) bool {
	if s.tok != tok || s.over.Load() {
		return false
	}
	return s.pending.Load() > 0 || time.Now().UnixNano()-s.last.Load() < int64(idleAfter)
}

// send sends call and queues w for its reply; false if the stream has
// ended or has maxWaiting calls waiting (the call was not sent).
func (s *stream) send(call *repoolv1.LeaseCall, w *waiter) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil || s.half || s.pending.Load() >= maxWaiting {
		return false // ended, or backed up (decided here, under mu, not only in pick)
	}
	s.queue = append(s.queue, w)
	s.pending.Add(1)
	if err := s.bs.Send(call); err != nil {
		// The stream ended (its error is what Recv returns): the call was
		// not sent.
		s.queue = s.queue[:len(s.queue)-1]
		s.pending.Add(-1)
		s.over.Store(true)
		return false
	}
	s.last.Store(time.Now().UnixNano())
	return true
}

// answered reports whether a reply has arrived on the stream.
func (s *stream) answered() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replied
}

// closeSend half-closes the stream: the server answers the calls sent and
// ends it.
func (s *stream) closeSend() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.half || s.err != nil {
		return
	}
	s.half = true
	s.over.Store(true)
	_ = s.bs.CloseSend()
}

// receive delivers the stream's replies in order until it ends, then
// answers the calls left with the stream's error.
func (s *stream) receive() {
	defer s.cancel()
	for {
		reply, err := s.bs.Recv()
		s.mu.Lock()
		if err != nil {
			s.err = err
			s.over.Store(true)
			s.pending.Store(0)
			left := s.queue[s.head:]
			s.queue, s.head = nil, 0
			replied := s.replied
			s.mu.Unlock()
			s.fail(left, err, replied)
			return
		}
		s.replied = true
		if s.head == len(s.queue) {
			// A reply to no call: the stream cannot be trusted to pair
			// replies with calls. Recv then returns CANCELED.
			s.mu.Unlock()
			s.cancel()
			continue
		}
		w := s.queue[s.head]
		s.queue[s.head] = nil
		s.head++
		s.pending.Add(-1)
		if s.head == len(s.queue) {
			s.queue, s.head = s.queue[:0], 0
		}
		s.mu.Unlock()
		w.answer(s, reply, nil)
	}
}

// fail answers the calls a stream ended without answering. A stream the
// server refused before answering anything (UNIMPLEMENTED: no Leases;
// RESOURCE_EXHAUSTED: over the tenant's streams, calls or rate) read none
// of them: they are made unary, and so are the next calls for a while.
// Otherwise they get the stream's status, as unary calls in flight on a
// connection that broke would; INTERNAL is read as UNAVAILABLE: the server
// never ends a stream with it, but a proxy between resets the stream when
// the server behind it dies (RST_STREAM INTERNAL_ERROR, which gRPC reads
// as INTERNAL), where a unary call in flight gets the proxy's 502
// (UNAVAILABLE). Either way the calls' outcome is unknown and retried.
func (s *stream) fail(left []*waiter, err error, replied bool) {
	code := status.Code(err)
	if errors.Is(err, io.EOF) {
		err = status.Error(codes.Unavailable, "the lease stream ended before answering the call")
	} else if code == codes.Internal {
		err = status.Errorf(codes.Unavailable, "the lease stream broke before answering the call: %s", status.Convert(err).Message())
	} else if !replied && (code == codes.Unimplemented || code == codes.ResourceExhausted) {
		s.c.unaryUntil.Store(time.Now().Add(fallbackFor).UnixNano())
		err = errUnary
	}
	for _, w := range left {
		w.answer(s, nil, err)
	}
}

// waiter is a call waiting for its reply.
type waiter struct {
	done  chan struct{} // receives once the reply (or error) is set
	state atomic.Int32
	reply *repoolv1.LeaseReply
	err   error
}

// A waiter's states.
const (
	waiting   int32 = iota
	answered        // the caller takes the reply
	abandoned       // the caller gave up: the receiver disposes of the reply
)

var waiters = sync.Pool{New: func() any { return &waiter{done: make(chan struct{}, 1)} }}

func getWaiter() *waiter {
	w := waiters.Get().(*waiter)
	w.state.Store(waiting)
	return w
}

func putWaiter(w *waiter) {
	w.reply, w.err = nil, nil
	waiters.Put(w)
}

// answer hands a reply (or the stream's error) to the caller, or, when
// the caller gave up, releases the lease the reply grants.
func (w *waiter) answer(s *stream, reply *repoolv1.LeaseReply, err error) {
	w.reply, w.err = reply, err
	if w.state.CompareAndSwap(waiting, answered) {
		w.done <- struct{}{}
		return
	}
	putWaiter(w)
	if lease := granted(reply); lease != nil {
		go s.c.releaseAbandoned(s.tok, lease)
	}
}

// granted returns the lease a reply grants: an Acquire's, or the next
// lease of a Release.
func granted(reply *repoolv1.LeaseReply) *repoolv1.Lease {
	if l := reply.GetAcquire().GetLease(); l != nil {
		return l
	}
	return reply.GetRelease().GetNext().GetLease()
}

// releaseTimeout bounds the release of a lease granted to a call that gave
// up.
const releaseTimeout = 5 * time.Second

// releaseAbandoned releases a lease granted to a call that gave up before
// its reply, so that it does not hold its resource until it expires.
func (c *Client) releaseAbandoned(tok *token.Token, l *repoolv1.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	_, _ = c.With(tok).Release(tok.Outgoing(ctx), &repoolv1.ReleaseRequest{LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken()})
}

// reasons maps a Problem's code to its ErrorInfo reason.
var reasons = map[string]string{
	"no_resource_available": repoolv1.ReasonNoResourceAvailable,
	"rate_limited":          repoolv1.ReasonRateLimited,
	"over_budget":           repoolv1.ReasonOverBudget,
}

// replyError is the status error the unary call would have been answered
// with: the reply's code and message, with the server's ErrorInfo detail
// (reason, why, frees_at, retry_after_ms) rebuilt from the Problem, and
// the retry-after also in the trailer a grpc.Trailer option asks for.
func replyError(p *repoolv1.Problem, code codes.Code, opts []grpc.CallOption) error {
	if code == codes.OK {
		code = codes.Unknown
	}
	st := status.New(code, p.GetMessage())
	reason, ok := reasons[p.GetCode()]
	if !ok {
		return st.Err()
	}
	md := map[string]string{}
	if p.GetWhy() != "" {
		md[repoolv1.ErrorInfoWhy] = p.GetWhy()
	}
	if p.GetFreesAt() != nil {
		md[repoolv1.ErrorInfoFreesAt] = p.GetFreesAt().AsTime().Format(time.RFC3339Nano)
	}
	if ms := p.GetRetryAfterMs(); ms > 0 {
		md[repoolv1.ErrorInfoRetryAfterMS] = strconv.Itoa(int(ms))
		for _, o := range opts {
			if t, ok := o.(grpc.TrailerCallOption); ok && t.TrailerAddr != nil {
				*t.TrailerAddr = metadata.Pairs(repoolv1.RetryAfterKey, strconv.Itoa(int(ms)))
			}
		}
	}
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Domain: repoolv1.ErrorDomain, Reason: reason, Metadata: md}); err == nil {
		st = d
	}
	return st.Err()
}
