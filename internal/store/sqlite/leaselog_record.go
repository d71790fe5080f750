package sqlite

import (
	"encoding/binary"
	"errors"
	"fmt"
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
// where a string is its uvarint length and its bytes. Replay stops at the
// first record whose header, length, checksum or payload does not hold.
// What follows it is a torn tail (a record a crash cut short, cut off at
// the next open) only if no intact record starts anywhere after it: the
// length and checksum let scanLog find a record again after a bad one, and
// a bad record that intact records follow is damage no crash leaves.

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
		r, size, why := decodeRecord(b[n:])
		if why != "" {
			return recs, n, errTorn
		}
		recs = append(recs, r)
		n += size
	}
	return recs, n, nil
}

// decodeRecord decodes the record at the start of b and returns it with
// the bytes it takes, or why it is not a whole record.
func decodeRecord(b []byte) (r leaseRecord, n int, why string) {
	if len(b) < recordHeader {
		return r, 0, fmt.Sprintf("%d bytes, shorter than a record's %d-byte header", len(b), recordHeader)
	}
	size := binary.LittleEndian.Uint32(b)
	if size > maxRecord {
		return r, 0, fmt.Sprintf("its length %d is above the largest record (%d)", size, maxRecord)
	}
	if uint64(size) > uint64(len(b)-recordHeader) {
		return r, 0, fmt.Sprintf("its length %d runs past the end of the file (%d bytes left)", size, len(b)-recordHeader)
	}
	payload := b[recordHeader : recordHeader+int(size)]
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		return r, 0, "its checksum does not match"
	}
	r, ok := decodePayload(payload)
	if !ok {
		return r, 0, "its payload is not a lease record"
	}
	return r, recordHeader + int(size), ""
}

// logDamage is where a lease log stops being whole records.
type logDamage struct {
	off  int    // the first byte that is not part of a whole record
	why  string // what is wrong with the record there
	next int    // the first intact record after off, or -1: none follows
}

// torn reports whether the damage is a torn tail: no intact record
// follows it. A crash of the process can only cut the last record short;
// a bad record that intact records follow is corruption.
func (d *logDamage) torn() bool { return d.next < 0 }

// scanLog decodes the whole records at the start of b, as decodeRecords
// does, and describes what follows them, if anything: damage (nil when b
// is whole records to its end), and whether an intact record follows the
// damage, found by trying every later offset as a record's start.
func scanLog(b []byte) (recs []leaseRecord, n int, damage *logDamage) {
	for n < len(b) {
		r, size, why := decodeRecord(b[n:])
		if why != "" {
			return recs, n, &logDamage{off: n, why: why, next: nextRecord(b, n+1)}
		}
		recs = append(recs, r)
		n += size
	}
	return recs, n, nil
}

// nextRecord returns the first offset at or after from where an intact
// record starts, or -1.
func nextRecord(b []byte, from int) int {
	for p := from; p+recordHeader <= len(b); p++ {
		size := binary.LittleEndian.Uint32(b[p:])
		// Cheap checks first: most offsets name a length that does not
		// fit, or a checksum that does not match.
		if size == 0 || size > maxRecord || uint64(size) > uint64(len(b)-p-recordHeader) {
			continue
		}
		if _, _, why := decodeRecord(b[p:]); why == "" {
			return p
		}
	}
	return -1
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
