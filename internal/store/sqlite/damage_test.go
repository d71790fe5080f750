package sqlite

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/testenv"
)

// The rule every test here checks, on the real restore path: a torn tail
// (bad bytes that no intact record follows) is cut and logged, and the
// records before it are replayed; anything that an intact record follows
// stops the open with a *CorruptLogError naming the file and the offset
// of the first bad record, and leaves the file byte for byte as it was.

// logBuffer is a slog handler's output, safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func bufferLogger() (*slog.Logger, *logBuffer) {
	b := &logBuffer{}
	return slog.New(slog.NewTextHandler(b, nil)), b
}

// baseLog is a lease log of four records of different sizes, and the
// offset where each starts (and, last, the log's length).
func baseLog() (b []byte, recs []leaseRecord, starts []int) {
	recs = []leaseRecord{
		{tenant: "a", put: []store.LeaseRow{row(1, 10), row(2, 20)}},
		{tenant: "b", put: []store.LeaseRow{{ID: 1 << 41, ResourceID: "proxy-17", Context: "search", Token: 1<<41 | 5, ExpiresAt: 1_700_000_000_000}}},
		{tenant: "a", del: []uint64{1}},
		{tenant: "a", put: []store.LeaseRow{row(3, 30)}, del: []uint64{2}},
	}
	for _, r := range recs {
		starts = append(starts, len(b))
		b = appendRecord(b, r.tenant, r.put, r.del)
	}
	return b, recs, append(starts, len(b))
}

func sameRecords(a, b []leaseRecord) bool {
	return slices.EqualFunc(a, b, func(x, y leaseRecord) bool {
		return x.tenant == y.tenant && slices.Equal(x.put, y.put) && slices.Equal(x.del, y.del)
	})
}

// intactAfter reports whether a whole record starts anywhere in b after
// offset from: the oracle, written apart from scanLog.
func intactAfter(b []byte, from int) bool {
	for p := from + 1; p < len(b); p++ {
		if _, _, why := decodeRecord(b[p:]); why == "" {
			return true
		}
	}
	return false
}

// openDamaged writes damaged as a lease log, opens it as the restore path
// does (openLeaseLog), closes it, and returns what it gave, the file's
// bytes afterwards and the log's output.
func openDamaged(t testing.TB, damaged []byte) (recs []leaseRecord, after []byte, logged string, err error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "repool.db"+leaseLogSuffix)
	if err := os.WriteFile(path, damaged, fileMode); err != nil {
		t.Fatal(err)
	}
	log, buf := bufferLogger()
	l, recs, err := openLeaseLog(path, false, log)
	if err == nil {
		l.close()
	}
	after, rerr := os.ReadFile(path)
	if rerr != nil {
		t.Fatal(rerr)
	}
	return recs, after, buf.String(), err
}

// checkTorn checks the outcome of a torn tail at cut: the records before
// it, the file cut there, and a log line naming the offset.
func checkTorn(t testing.TB, what string, damaged []byte, want []leaseRecord, cut int) {
	t.Helper()
	recs, after, logged, err := openDamaged(t, damaged)
	if err != nil {
		t.Fatalf("%s: openLeaseLog = got error %v, want the torn tail at offset %d cut", what, err, cut)
	}
	if !sameRecords(recs, want) {
		t.Fatalf("%s: openLeaseLog records = got %d, want the %d before the torn tail", what, len(recs), len(want))
	}
	if !bytes.Equal(after, damaged[:cut]) {
		t.Fatalf("%s: the log after open = got %d bytes, want the %d before the torn tail", what, len(after), cut)
	}
	if cut < len(damaged) && !(strings.Contains(logged, "torn tail") && strings.Contains(logged, fmt.Sprintf("offset=%d ", cut))) {
		t.Fatalf("%s: cutting a torn tail at %d logged %q, want a line saying so with offset=%d", what, cut, logged, cut)
	}
	if cut == len(damaged) && logged != "" {
		t.Fatalf("%s: a whole log logged %q, want nothing", what, logged)
	}
}

// checkCorrupt checks the outcome of damage at off that an intact record
// at next follows: the error names the file and both offsets, wraps
// store.ErrCorrupt, and the file is unchanged.
func checkCorrupt(t testing.TB, what string, damaged []byte, off, next int) {
	t.Helper()
	_, after, _, err := openDamaged(t, damaged)
	var ce *CorruptLogError
	if !errors.As(err, &ce) || !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("%s: openLeaseLog = got error %v, want a *CorruptLogError wrapping store.ErrCorrupt", what, err)
	}
	if ce.Offset != int64(off) || ce.Next != int64(next) {
		t.Fatalf("%s: damage = got offset %d, next record %d, want %d and %d", what, ce.Offset, ce.Next, off, next)
	}
	msg := err.Error()
	if !strings.Contains(msg, ce.Path) || !strings.HasSuffix(ce.Path, "repool.db"+leaseLogSuffix) || !strings.Contains(msg, fmt.Sprintf("offset %d ", off)) {
		t.Fatalf("%s: error = %q, want it to name the file and offset %d", what, msg, off)
	}
	if !bytes.Equal(after, damaged) {
		t.Fatalf("%s: the damaged log after open = got %d bytes, want it unchanged (%d bytes)", what, len(after), len(damaged))
	}
}

// TestLeaseLogDamage flips every byte of a log of four records (each
// record's header and payload; the last record's too), cuts the last
// record at every offset, and appends and inserts garbage.
func TestLeaseLogDamage(t *testing.T) {
	base, recs, starts := baseLog()
	last := len(recs) - 1
	recordOf := func(off int) int {
		for i := range recs {
			if off < starts[i+1] {
				return i
			}
		}
		t.Fatalf("offset %d beyond the log", off)
		return -1
	}
	checkTorn(t, "the whole log", base, recs, len(base))

	for off := range base {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			damaged := bytes.Clone(base)
			damaged[off] ^= mask
			i := recordOf(off)
			what := fmt.Sprintf("byte %d (record %d, %s) xor %#x", off, i, map[bool]string{true: "header", false: "payload"}[off-starts[i] < recordHeader], mask)
			if i == last {
				// Nothing follows the last record: a crash on a power
				// loss can leave it so; it is cut, and logged.
				checkTorn(t, what, damaged, recs[:i], starts[i])
			} else {
				checkCorrupt(t, what, damaged, starts[i], starts[i+1])
			}
		}
	}

	for cut := starts[last]; cut < len(base); cut++ {
		checkTorn(t, fmt.Sprintf("cut at %d, in the last record", cut), base[:cut], recs[:last], starts[last])
	}
	// A cut in an earlier record leaves no intact record after it either:
	// as far as the file can tell, a torn tail.
	checkTorn(t, "cut in the middle of record 1", base[:starts[1]+10], recs[:1], starts[1])

	for _, garbage := range [][]byte{
		{0},
		make([]byte, 4096), // a filesystem's zero-filled tail after a power loss
		bytes.Repeat([]byte{0xff}, 100),
		[]byte("not a record at all"),
		{0x05, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5}, // a header whose checksum does not hold
	} {
		checkTorn(t, fmt.Sprintf("%d bytes of garbage appended", len(garbage)), append(bytes.Clone(base), garbage...), recs, len(base))
		// The same garbage between two records is not a tail.
		inserted := slices.Concat(base[:starts[2]], garbage, base[starts[2]:])
		checkCorrupt(t, fmt.Sprintf("%d bytes of garbage inserted before record 2", len(garbage)), inserted, starts[2], starts[2]+len(garbage))
	}
	// A record lost from the middle (its bytes zeroed).
	zeroed := bytes.Clone(base)
	clear(zeroed[starts[1]:starts[2]])
	checkCorrupt(t, "record 1 zeroed", zeroed, starts[1], starts[2])
}

// TestLeaseLogCorruptStopsTheClaim: on the store's real restore path
// (LockWriter, as a server's start takes it) a damaged record that intact
// records follow fails the claim with the error naming the file and the
// offset, replays nothing into the table, and leaves the log unchanged; a
// torn tail is cut, logged, and the records before it are restored.
func TestLeaseLogCorruptStopsTheClaim(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "repool.db")
	s, c := claimed(t, path)
	for i := range uint64(4) {
		mustWrite(t, s, []store.LeaseRow{row(i+1, int64(10*(i+1)))}, nil)
	}
	crash(s, c)
	logPath := path + leaseLogSuffix
	base, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	_, n, _ := decodeRecords(base)
	_, size, _ := decodeRecord(base)
	if n != len(base) || len(base) != 4*size {
		t.Fatalf("the log after four writes = %d bytes, want four records of %d", len(base), size)
	}

	damaged := bytes.Clone(base)
	damaged[size+recordHeader+2] ^= 0x10 // in record 1's payload
	if err := os.WriteFile(logPath, damaged, fileMode); err != nil {
		t.Fatal(err)
	}
	log, buf := bufferLogger()
	s2 := openTest(t, path, store.Options{Log: log})
	_, err = s2.LockWriter(t.Context())
	var ce *CorruptLogError
	if !errors.As(err, &ce) || ce.Offset != int64(size) || !strings.Contains(err.Error(), logPath) || !strings.Contains(err.Error(), fmt.Sprintf("offset %d ", size)) {
		t.Fatalf("LockWriter on a log damaged at offset %d = got %v, want a *CorruptLogError naming %s and the offset", size, err, logPath)
	}
	if got, err := s2.tableLeases(t.Context(), "a"); err != nil || len(got) != 0 {
		t.Fatalf("lease_journal after the refused claim = got %v, %v, want nothing replayed", got, err)
	}
	if after, _ := os.ReadFile(logPath); !bytes.Equal(after, damaged) {
		t.Fatalf("the damaged log after the refused claim = got %d bytes, want it unchanged (%d)", len(after), len(damaged))
	}
	if _, err := s2.LockWriter(t.Context()); !errors.As(err, &ce) {
		t.Fatalf("LockWriter again = got %v, want the same refusal (nothing was repaired quietly)", err)
	}
	ro, err := Open(t.Context(), path, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := ro.LoadLeases(t.Context(), "a"); !errors.As(err, &ce) {
		t.Fatalf("read-only LoadLeases on the damaged log = got %v, want a *CorruptLogError", err)
	}

	// Torn: the last record cut short.
	if err := os.WriteFile(logPath, base[:len(base)-5], fileMode); err != nil {
		t.Fatal(err)
	}
	c3, err := s2.LockWriter(t.Context())
	if err != nil {
		t.Fatalf("LockWriter on a torn tail = got %v, want nil", err)
	}
	defer c3.Release()
	if got, want := mustLoad(t, s2), []store.LeaseRow{row(1, 10), row(2, 20), row(3, 30)}; !slices.Equal(got, want) {
		t.Fatalf("LoadLeases(a) after a torn tail = got %v, want %v", got, want)
	}
	if !strings.Contains(buf.String(), "torn tail") || !strings.Contains(buf.String(), fmt.Sprintf("offset=%d ", 3*size)) || !strings.Contains(buf.String(), logPath) {
		t.Fatalf("log after cutting a torn tail = %q, want a warning naming %s and offset=%d", buf.String(), logPath, 3*size)
	}
}

// FuzzLeaseLogDamage: any damage to a log of four records (a byte set at
// an offset, a cut, bytes inserted at an offset), opened as the restore
// path opens it. Either the open fails with a *CorruptLogError naming the
// offset where whole records end, an intact record really follows there,
// and the file is unchanged; or it succeeds, no intact record follows the
// records it replays, the file is cut there (and the cut logged), and
// every record before the first changed byte is among them.
func FuzzLeaseLogDamage(f *testing.F) {
	base, _, starts := baseLog()
	f.Add(uint16(0), uint8(0), byte(0), []byte(nil))                         // nothing changed
	f.Add(uint16(3), uint8(0), byte(0xff), []byte(nil))                      // a length byte
	f.Add(uint16(starts[1]+5), uint8(0), byte('x'), []byte(nil))             // mid-record
	f.Add(uint16(starts[3]+9), uint8(0), byte(0), []byte(nil))               // the last record
	f.Add(uint16(starts[3]+4), uint8(1), byte(0), []byte(nil))               // cut in the last record
	f.Add(uint16(starts[2]), uint8(1), byte(0), []byte(nil))                 // cut at a record boundary
	f.Add(uint16(len(base)), uint8(2), byte(0), make([]byte, 64))            // zeros appended
	f.Add(uint16(starts[1]), uint8(2), byte(0), []byte("garbage"))           // garbage between records
	f.Add(uint16(starts[2]+3), uint8(2), byte(0), base[starts[1]:starts[2]]) // a whole record inside another
	f.Fuzz(func(t *testing.T, at uint16, op uint8, v byte, ins []byte) {
		off := int(at) % (len(base) + 1)
		damaged := bytes.Clone(base)
		switch op % 3 {
		case 0:
			if off == len(base) {
				return
			}
			damaged[off] = v
		case 1:
			damaged = damaged[:off]
		case 2:
			damaged = slices.Concat(base[:off], ins, base[off:])
		}
		first := off // the first byte that may differ from base
		keep := 0    // base's records wholly before it
		for keep < len(starts)-1 && starts[keep+1] <= first {
			keep++
		}
		var recs []leaseRecord
		var err error
		var after []byte
		var logged string
		testenv.Timed(t, "opening a damaged lease log", func() { recs, after, logged, err = openDamaged(t, damaged) })
		want, _, _ := decodeRecords(base[:starts[keep]])
		if err != nil {
			var ce *CorruptLogError
			if !errors.As(err, &ce) || !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("openLeaseLog = got error %v, want a *CorruptLogError", err)
			}
			_, n, _ := decodeRecords(damaged)
			if ce.Offset != int64(n) || ce.Next <= ce.Offset || !intactAfter(damaged, n) || ce.Offset < int64(starts[keep]) {
				t.Fatalf("CorruptLogError = offset %d, next %d; want offset %d (where whole records end, at or after %d) and an intact record after it", ce.Offset, ce.Next, n, starts[keep])
			}
			if _, _, why := decodeRecord(damaged[ce.Next:]); why != "" {
				t.Fatalf("CorruptLogError names offset %d as an intact record, but it is not: %s", ce.Next, why)
			}
			if !strings.Contains(err.Error(), ce.Path) || !strings.Contains(err.Error(), fmt.Sprintf("offset %d ", ce.Offset)) {
				t.Fatalf("error %q does not name the file and the offset", err)
			}
			if !bytes.Equal(after, damaged) {
				t.Fatalf("the log after a refused open = %d bytes, want unchanged (%d)", len(after), len(damaged))
			}
			return
		}
		n := len(after)
		if !bytes.Equal(after, damaged[:n]) {
			t.Fatalf("the log after open is not a prefix of what it was")
		}
		if intactAfter(damaged, n) && n < len(damaged) {
			t.Fatalf("open cut the log at %d of %d bytes with an intact record after the cut", n, len(damaged))
		}
		if got, m, _ := decodeRecords(damaged[:n]); m != n || !sameRecords(got, recs) {
			t.Fatalf("open replayed %d records and kept %d bytes, which hold %d whole records in %d bytes", len(recs), n, len(got), m)
		}
		if len(recs) < len(want) || !sameRecords(recs[:len(want)], want) {
			t.Fatalf("open replayed %d records, want at least the %d written wholly before the first changed byte %d", len(recs), len(want), first)
		}
		if (n < len(damaged)) != strings.Contains(logged, "torn tail") {
			t.Fatalf("cut %d of %d bytes, logged %q: want a torn-tail line exactly when something was cut", len(damaged)-n, len(damaged), logged)
		}
	})
}
