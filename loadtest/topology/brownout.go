package topology

import (
	"context"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// brownout is a gRPC-level proxy in front of one server: it forwards every
// call (unary or streaming, frames untouched) and, while its share is set,
// answers that share of calls UNAVAILABLE itself, without forwarding them —
// what an overloaded server or a sick load balancer does in a 503
// brownout. It works per call, not per connection: gRPC multiplexes every
// call of a client on one connection, so a connection-level fault
// (toxiproxy's reset_peer) would fail all calls in flight at once instead of
// a share of them. Safe for concurrent use.
type brownout struct {
	share atomic.Uint64 // math.Float64bits of the share
	ln    net.Listener
	srv   *grpc.Server
	conn  *grpc.ClientConn
}

// brownoutMessage is the status message of an injected failure.
const brownoutMessage = "brownout injected by the load test"

// startBrownout starts a proxy to target (host:port, h2c) on a free port.
func startBrownout(target string) (*brownout, error) {
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		conn.Close()
		return nil, err
	}
	b := &brownout{ln: ln, conn: conn}
	b.srv = grpc.NewServer(grpc.ForceServerCodecV2(frameCodec{}), grpc.UnknownServiceHandler(b.forward))
	go func() { _ = b.srv.Serve(ln) }()
	return b, nil
}

func (b *brownout) addr() string { return b.ln.Addr().String() }

// setShare sets the share of calls answered UNAVAILABLE, 0 to 1.
func (b *brownout) setShare(v float64) { b.share.Store(math.Float64bits(v)) }

func (b *brownout) close() {
	b.srv.Stop()
	b.conn.Close()
}

// forward serves one call: inject, or pass it through to the server.
func (b *brownout) forward(_ any, ss grpc.ServerStream) error {
	if share := math.Float64frombits(b.share.Load()); share > 0 && rand.Float64() < share {
		return status.Error(codes.Unavailable, brownoutMessage)
	}
	method, _ := grpc.MethodFromServerStream(ss)
	md, _ := metadata.FromIncomingContext(ss.Context())
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ss.Context(), md))
	defer cancel()
	cs, err := b.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, grpc.ForceCodecV2(frameCodec{}))
	if err != nil {
		return err
	}
	// Client to server; ends when the client half-closes or the call ends.
	go func() {
		for {
			f := &frame{}
			if err := ss.RecvMsg(f); err != nil {
				_ = cs.CloseSend()
				return
			}
			if err := cs.SendMsg(f); err != nil {
				return
			}
		}
	}()
	// Server to client, then the server's trailer and status.
	sentHeader := false
	for {
		f := &frame{}
		err := cs.RecvMsg(f)
		if !sentHeader {
			if h, herr := cs.Header(); herr == nil && len(h) > 0 {
				_ = ss.SendHeader(h)
			}
			sentHeader = true
		}
		if err != nil {
			ss.SetTrailer(cs.Trailer())
			if err == io.EOF {
				return nil
			}
			return err // the server's status, passed on as is
		}
		if err := ss.SendMsg(f); err != nil {
			return err
		}
	}
}

// frame is one message, undecoded.
type frame struct{ data []byte }

// frameCodec passes messages through as bytes. It takes the name "proto"
// so that the content-subtype on the wire stays what clients expect.
type frameCodec struct{}

// Marshal returns the frame's bytes.
func (frameCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(*frame).data)}, nil
}

// Unmarshal keeps a copy of the bytes.
func (frameCodec) Unmarshal(data mem.BufferSlice, v any) error {
	v.(*frame).data = data.Materialize()
	return nil
}

// Name is "proto", the content-subtype clients send.
func (frameCodec) Name() string { return "proto" }
