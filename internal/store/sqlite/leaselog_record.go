package sqlite

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"

	"github.com/repool/repool/internal/store"
)

// A lease log record is one WriteLeases call:
//
//	length  uint32, little endian: the payload's length
//	crc     uint32, little endian: CRC-32C of the payload
//	payload tenant (string), puts (uvarint count, then per lease: id,
//	        token (uvarints), expires_at (varint), resource, context
//	        (strings)), deletions (uvarint count, then ids (uvarints))
//
// where a string is its uvarint length and its bytes. A record is whole or
// it is the log's torn tail: replay stops at the first record whose header,
// length or checksum does not hold.

// recordHeader is the length and checksum before each payload.
const recordHeader = 8

// maxRecord bounds one record's payload, so a corrupt length cannot make
// replay allocate without bound. The journal writes at most 1,024 changes
// in a batch, each well under 1 KiB.
const maxRecord = 16 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errTorn ends replay: the bytes from here on are not a whole record.
var errTorn = errors.New("torn or corrupt lease log record")

// leaseRecord is one decoded record.
type leaseRecord struct {
	tenant string
	put    []store.LeaseRow
	del    []uint64
}

// appendRecord appends the encoded record of one WriteLeases call to buf.
func appendRecord(buf []byte, tenant string, put []store.LeaseRow, del []uint64) []byte {
	start := len(buf)
	buf = append(buf, make([]byte, recordHeader)...)
	buf = appendString(buf, tenant)
	buf = binary.AppendUvarint(buf, uint64(len(put)))
	for _, l := range put {
		buf = binary.AppendUvarint(buf, l.ID)
		buf = binary.AppendUvarint(buf, l.Token)
		buf = binary.AppendVarint(buf, l.ExpiresAt)
		buf = appendString(buf, l.ResourceID)
		buf = appendString(buf, l.Context)
	}
	buf = binary.AppendUvarint(buf, uint64(len(del)))
	for _, id := range del {
		buf = binary.AppendUvarint(buf, id)
	}
	payload := buf[start+recordHeader:]
	binary.LittleEndian.PutUint32(buf[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(buf[start+4:], crc32.Checksum(payload, castagnoli))
	return buf
}

func appendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

// decodeRecords decodes the whole records at the start of b and returns
// them with the number of bytes they take; it stops at the first torn or
// corrupt one (err is then errTorn) or at the end of b.
func decodeRecords(b []byte) (recs []leaseRecord, n int, err error) {
	for n < len(b) {
		rest := b[n:]
		if len(rest) < recordHeader {
			return recs, n, errTorn
		}
		size := binary.LittleEndian.Uint32(rest)
		if size > maxRecord || uint64(size) > uint64(len(rest)-recordHeader) {
			return recs, n, errTorn
		}
		payload := rest[recordHeader : recordHeader+int(size)]
		if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(rest[4:]) {
			return recs, n, errTorn
		}
		r, ok := decodePayload(payload)
		if !ok {
			return recs, n, errTorn
		}
		recs = append(recs, r)
		n += recordHeader + int(size)
	}
	return recs, n, nil
}

// decodePayload decodes one checksummed payload; ok is false if it is not
// one appendRecord wrote.
func decodePayload(p []byte) (r leaseRecord, ok bool) {
	d := decoder{b: p, ok: true}
	r.tenant = d.str()
	nput := d.count(5) // each put takes at least five bytes
	for i := uint64(0); i < nput && d.ok; i++ {
		l := store.LeaseRow{ID: d.uvarint(), Token: d.uvarint(), ExpiresAt: d.varint()}
		l.ResourceID, l.Context = d.str(), d.str()
		r.put = append(r.put, l)
	}
	ndel := d.count(1)
	for i := uint64(0); i < ndel && d.ok; i++ {
		r.del = append(r.del, d.uvarint())
	}
	return r, d.ok && len(d.b) == 0
}

// decoder reads a payload; the first failure clears ok and every later
// read returns zero values.
type decoder struct {
	b  []byte
	ok bool
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	d.skip(n)
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	d.skip(n)
	return v
}

// skip consumes the n bytes a varint took; n <= 0 (too short, or beyond 64
// bits) fails the decoder. The binary package returns 0 with such an n.
func (d *decoder) skip(n int) {
	if n <= 0 {
		d.fail()
		return
	}
	d.b = d.b[n:]
}

// count reads a count of items of at least minSize bytes each, refusing
// one the rest of the payload cannot hold.
func (d *decoder) count(minSize int) uint64 {
	c := d.uvarint()
	if c > math.MaxInt32 || c*uint64(minSize) > uint64(len(d.b)) {
		d.fail()
		return 0
	}
	return c
}

func (d *decoder) str() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) fail() { d.ok, d.b = false, nil }
