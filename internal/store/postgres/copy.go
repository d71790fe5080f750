package postgres

import (
	"encoding/binary"
	"io"
	"math"
)

// copyChunk is how many bytes of COPY data are encoded before they are
// handed to the connection.
const copyChunk = 256 << 10

// copyHeader starts PostgreSQL's binary COPY format: signature, flags (no
// OIDs), header extension length.
const copyHeader = "PGCOPY\n\xff\r\n\x00" + "\x00\x00\x00\x00" + "\x00\x00\x00\x00"

// copyReader streams rows as a binary COPY ... FROM STDIN body for
// pgconn.CopyFrom. Encoding the few column types of checkpoint rows by
// hand, instead of through pgx.CopyFrom's generic per-value encoders, takes
// a Full checkpoint's client work from about a third of a second to a few
// milliseconds: no boxing of each value in an interface and no encode-plan
// lookups. Text must be valid UTF-8 (store validation guarantees it; the
// connection's client_encoding is UTF8).
type copyReader struct {
	rows int
	next int
	// tuple appends row i's fields (tuple header included) to b.
	tuple func(b []byte, i int) []byte
	buf   []byte
	off   int
	state int // 0: header pending, 1: rows, 2: trailer written
}

func newCopyReader(rows int, tuple func(b []byte, i int) []byte) *copyReader {
	return &copyReader{rows: rows, tuple: tuple, buf: make([]byte, 0, copyChunk+4096)}
}

// Read implements io.Reader.
func (r *copyReader) Read(p []byte) (int, error) {
	if r.off == len(r.buf) {
		if r.state == 2 {
			return 0, io.EOF
		}
		r.fill()
	}
	n := copy(p, r.buf[r.off:])
	r.off += n
	return n, nil
}

// fill encodes the next chunk of rows (and the header or trailer).
func (r *copyReader) fill() {
	b := r.buf[:0]
	if r.state == 0 {
		b = append(b, copyHeader...)
		r.state = 1
	}
	for r.next < r.rows && len(b) < copyChunk {
		b = r.tuple(b, r.next)
		r.next++
	}
	if r.next == r.rows {
		b = binary.BigEndian.AppendUint16(b, 0xffff) // trailer: field count -1
		r.state = 2
	}
	r.buf, r.off = b, 0
}

// Field encoders: a length, then the value in network byte order.

func appendFields(b []byte, n int) []byte { return binary.BigEndian.AppendUint16(b, uint16(n)) }

func appendText(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func appendInt4(b []byte, v int32) []byte {
	b = binary.BigEndian.AppendUint32(b, 4)
	return binary.BigEndian.AppendUint32(b, uint32(v))
}

func appendInt8(b []byte, v int64) []byte {
	b = binary.BigEndian.AppendUint32(b, 8)
	return binary.BigEndian.AppendUint64(b, uint64(v))
}

func appendFloat8(b []byte, v float64) []byte {
	b = binary.BigEndian.AppendUint32(b, 8)
	return binary.BigEndian.AppendUint64(b, math.Float64bits(v))
}

func appendBool(b []byte, v bool) []byte {
	b = binary.BigEndian.AppendUint32(b, 1)
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}
