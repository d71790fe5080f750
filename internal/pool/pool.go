package pool

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/repool/repool/internal/clock"
)

// Outcome is the result of one use of a resource.
type Outcome uint8

// Outcomes. The zero Outcome means "none" where a method allows it.
const (
	Success Outcome = iota + 1
	Failure
	// Blocked: the target refused the resource; it is quarantined for the
	// context at once.
	Blocked
)

// String returns the outcome's upper-case name.
func (o Outcome) String() string {
	switch o {
	case Success:
		return "SUCCESS"
	case Failure:
		return "FAILURE"
	case Blocked:
		return "BLOCKED"
	}
	return "NONE"
}

// Spec describes a resource to register.
type Spec struct {
	ID string
	// Capacity is the most leases the resource carries at once; 0 means 1.
	Capacity int
	Labels   map[string]string
	// MaxUses retires the resource once it has been leased this many
	// times; 0 means the pool's (Config.MaxUses).
	MaxUses int
	// MaxAge retires the resource this long after its registration; 0
	// means the pool's (Config.MaxAge).
	MaxAge time.Duration
}

// Lease grants the use of a resource for a context until ExpiresAt.
type Lease struct {
	ID        uint64
	Resource  string
	Context   string
	Token     uint64
	ExpiresAt time.Time
	// Rebound: the lease was asked with an affinity key that was bound to
	// another resource, and the key is bound to this one now
	// (AcquireAffine).
	Rebound bool
}

// Pool is one tenant's reputation pool. Create it with New. Safe for
// concurrent use.
type Pool struct {
	cfg   Config
	clock clock.Clock
	hl    int64 // half-life in nanoseconds

	mu     sync.RWMutex
	rng    *rand.Rand
	gate   Gate  // nil: nothing is charged
	closed error // set by Close: every change is refused with it

	ids        idIndex                    // resource id → index in res
	resView    atomic.Pointer[[]resource] // res as of its last growth, for prefetching without the lock
	hints      leaseHints
	res        []resource
	life       []lifetime       // by resource slot
	retiredWhy map[int32]string // why each retired resource was, by slot
	freeRes    []int32
	avail      []int32 // resources that can take a normal lease now
	labelIdx   map[string]map[string][]int32
	ctxIDs     map[string]int32 // interned contexts
	ctxNames   []string         // the first maxDense of them, by id
	ctxs       []*contextState
	freeCtxs   []int32 // ids of freed sparse contexts, for new ones
	dense      []cell  // see cells.go
	stride     int32
	sparse     []cell
	sparseKeys []cellKey // of sparse, by index
	sparseIdx  map[cellKey]int32
	freeCells  []int32 // free slots of sparse
	ncells     int
	probeRes   []int32   // whole-quarantined resources whose cooldown ended
	avoid      avoidSet  // the resources the acquire under way must not lease
	binds      bindings  // affinity keys → resources (affinity.go)
	explore    reservoir // for contexts without statistics yet
	leases     leaseTable
	expiries   minHeap[uint64]   // lease expiry → lease id
	cooldowns  minHeap[cooldown] // quarantine end → quarantine
	ageouts    minHeap[ageout]   // retirement by age → resource

	epoch      uint32
	counter    uint64 // low bits of the last fencing token
	leaseSeq   uint64 // low bits of the last lease id
	nresource  int
	nblocked   int  // live resources quarantined as a whole (in any quarantine state)
	units      int  // the resource units of the live resources (ResourceUnits)
	maxLeases  int  // 0: unlimited
	overbooked bool // Restore gave some resource more leases than its capacity
	counters   Counters

	dirtyRes   []int32
	dirtyCells []int32
	removed    []string

	bus *bus

	perTime bool // the objective is ObjectiveSuccessPerTime
}

// Counters are cumulative counts since New (not restored by Restore).
type Counters struct {
	Acquired      uint64
	Exhausted     uint64
	Probes        uint64
	Reports       uint64
	Expired       uint64
	Quarantined   uint64
	Recovered     uint64
	Retired       uint64
	Capped        uint64 // quarantines ended early by MaxQuarantinedShare
	DroppedEvents uint64 // subscribers disconnected for being slow
	// Rebound counts affinity keys bound to another resource;
	// BindingsExpired and BindingsEvicted the bindings dropped at their
	// expiry and to make room in the budget.
	Rebound, BindingsExpired, BindingsEvicted uint64
	// Outcomes counts Reports by outcome, indexed by Outcome (Success,
	// Failure, Blocked; index 0 stays 0).
	Outcomes [Blocked + 1]uint64
}

// tokenBits is how many low bits of a fencing token or lease id count
// within an epoch; the epoch fills the bits above.
const tokenBits = 40

// withEpoch returns the token or lease id low (a counter) stands for in the
// current epoch.
func (p *Pool) withEpoch(low uint64) uint64 { return uint64(p.epoch)<<tokenBits | low }

// quarantine states
const (
	qNone      uint8 = iota
	qBlocked         // cooling down until `until`
	qProbation       // cooldown over; waiting for a probe lease
	qProbing         // a probe lease is out
)

type quarantine struct {
	until int64
	level uint8
	state uint8
}

// resource is 128 bytes: two cache lines, which in a large (page-aligned)
// slice are a whole aligned pair. What Acquire reads for every candidate —
// capacity, availability, the aggregate a missing cell's prior comes from,
// and the labels a selector checks — lies in the first line, within
// resourceHot bytes. The second holds what identifies the resource,
// including the first idInline bytes of its id, so that finding a resource
// by id compares it there instead of loading the string from elsewhere.
type resource struct {
	capacity   int32
	active     int32
	availPos   int32 // index in Pool.avail, or -1; >= 0 iff live, not full, not quarantined
	ncells     int32
	agg        counts
	labels     map[string]string
	consecFail int32
	gen        uint32 // bumped when the slot is reused
	live       bool
	dirty      bool
	retired    bool       // retired (Pool.retiredWhy says why): never leased again
	ownUses    bool       // lifetime.maxUses is set: it, not the pool's, limits uses
	uses       uint32     // leases granted, at most MaxMaxUses
	q          quarantine // starts the second line
	id         string
	idHead     [idInline]byte // id[:idInline], zero-padded
	recent     recent         // the latest outcomes over all contexts
}

// idInline is how many leading bytes of an id a resource keeps inline.
const idInline = 24

// lifetime is what a resource keeps about its retirement that no lease
// or report reads: Pool.life[idx] for resource slot idx, 24 bytes.
type lifetime struct {
	born    int64  // registration, unix nanoseconds on the pool's clock
	maxAge  int64  // the resource's own limit in nanoseconds; 0: the pool's
	maxUses uint32 // the resource's own limit; 0: the pool's
	imposed bool   // its whole quarantine was imposed (Quarantine): the cap leaves it
}

// hasID reports whether the resource's id is id, reading the string
// itself only when the id is longer than idInline bytes.
func (r *resource) hasID(id string) bool {
	if len(id) != len(r.id) {
		return false
	}
	if len(id) <= idInline {
		return string(r.idHead[:len(id)]) == id
	}
	return string(r.idHead[:]) == id[:idInline] && r.id[idInline:] == id[idInline:]
}

// resourceHot is how many leading bytes of a resource hold the fields
// Acquire reads for every candidate (TestResourceHotFields).
const resourceHot = unsafe.Offsetof(resource{}.labels) + unsafe.Sizeof(resource{}.labels)

type leaseRec struct {
	context string
	token   uint64
	expires int64
	// probeOf is, for a probe lease, the end of the cooldown whose probation
	// it probes: it tells the probe that is out from an earlier one of the
	// same cell or resource that outlived its round (each cooldown ends
	// later than the one before).
	probeOf int64
	res     int32
	gen     uint32
	probe   uint8 // probeNone, probeCell, probeWhole
	bind    int32 // the affinity binding's slot + 1 the lease was made under; 0: none
}

const (
	probeNone uint8 = iota
	probeCell
	probeWhole
)

// contextState is what a pool keeps per interned context.
type contextState struct {
	name    string
	cells   int // the context's cells; a sparse context left with none is freed
	leaders [maxLeaders]leader
	nlead   int
	nquar   int     // the context's cells in quarantine (any state but qNone)
	probes  []int32 // resources whose cell cooldown ended, FIFO
	explore reservoir
	lat     latency // over the context's cells: for a cell not yet timed
}

// reservoir is a rotating sample of the resources with free capacity.
// Acquire scores all of it, replaces the entry it leases and any that can no
// longer take a lease, and rotates one entry in four calls, so consecutive
// calls score mostly the same, cache-hot candidates while every resource
// still comes up in turn.
type reservoir struct {
	idx [maxBatch]int32
	n   int
	rot int
	// Replacements are drawn two calls ahead, so that a new candidate is in
	// cache when it is first scored: drawn ones have had their resource's
	// line prefetched, warm ones their cell's line too.
	drawn, warm   [warmAhead]int32
	ndrawn, nwarm int
}

// warmAhead is how many replacement candidates a reservoir keeps in each
// stage of warming; a call replaces about one candidate (the winner).
const warmAhead = 2

type leader struct {
	res   int32
	score float64
}

// New returns an empty pool, or an error naming the bad Config field.
func New(cfg Config) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	p := &Pool{
		cfg:   cfg,
		clock: cfg.Clock,
		hl:    int64(cfg.HalfLife),
		rng:   rand.New(cfg.Rand),
		bus:   newBus(cfg.EventBuffer, cfg.EventHistory),
		ids:   newIDIndex(),
		gate:  cfg.Gate,

		perTime: cfg.Objective == ObjectiveSuccessPerTime,
	}
	p.reset()
	return p, nil
}

func (p *Pool) reset() {
	p.ids.reset()
	p.res, p.life = nil, nil
	p.retiredWhy = map[int32]string{}
	p.resView.Store(nil)
	p.hints.reset()
	p.freeRes = nil
	p.avail = nil
	p.labelIdx = map[string]map[string][]int32{}
	p.ctxIDs = map[string]int32{}
	p.ctxNames = nil
	p.ctxs, p.freeCtxs = nil, nil
	p.dense, p.stride = nil, 0
	p.sparse, p.sparseKeys, p.freeCells = nil, nil, nil
	p.sparseIdx = map[cellKey]int32{}
	p.ncells = 0
	p.probeRes = nil
	p.binds.reset()
	p.explore = reservoir{}
	p.leases.reset()
	p.expiries = nil
	p.cooldowns, p.ageouts = nil, nil
	p.nresource, p.units, p.nblocked = 0, 0, 0
	p.overbooked = false
	p.dirtyRes, p.dirtyCells, p.removed = nil, nil, nil
}

// idProblem says what makes s unusable as a resource id, context or label
// key, or returns "" if nothing does. Stores keep these as text, which is
// why NUL is refused along with invalid UTF-8. The description is built
// only for a bad s, so that checking a good one does not allocate.
func idProblem(s string) string {
	if s == "" {
		return "is empty"
	}
	return valueProblem(s)
}

// valueProblem is idProblem for a label value, which may be empty.
func valueProblem(s string) string {
	if len(s) <= MaxIDLen && plainASCII(s) {
		return ""
	}
	switch {
	case len(s) > MaxIDLen:
		return fmt.Sprintf("is %d bytes, more than %d", len(s), MaxIDLen)
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "contains NUL"
	}
	return ""
}

// plainASCII reports whether every byte of s is in [1, 0x7f]: valid UTF-8
// without NUL, which is what ids almost always are. It checks eight bytes
// at a time: a byte b sets the high bit of b | (b - 1) iff it is 0 or above
// 0x7f, and a borrow only crosses from a byte that is 0.
func plainASCII(s string) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	for len(s) >= 8 {
		w := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		if (w|(w-lo))&hi != 0 {
			return false
		}
		s = s[8:]
	}
	for i := 0; i < len(s); i++ {
		if s[i]-1 >= 0x7f {
			return false
		}
	}
	return true
}

// labelsProblem says what makes labels unusable as a resource's labels or
// a selector, or returns "".
func labelsProblem(labels map[string]string) string {
	if len(labels) > MaxLabels {
		return fmt.Sprintf("has %d labels, more than %d", len(labels), MaxLabels)
	}
	for k, v := range labels {
		if pr := idProblem(k); pr != "" {
			return fmt.Sprintf("key %q %s", k, pr)
		}
		if pr := valueProblem(v); pr != "" {
			return fmt.Sprintf("value for %q %s", k, pr)
		}
	}
	return ""
}

// validID returns an ErrInvalidArgument naming what if s is not a valid id,
// context or label key.
func validID(what, s string) error {
	if pr := idProblem(s); pr != "" {
		return fmt.Errorf("%w: %s %s", ErrInvalidArgument, what, pr)
	}
	return nil
}

// validLabels returns an ErrInvalidArgument naming what if labels are not
// valid.
func validLabels(what string, labels map[string]string) error {
	if pr := labelsProblem(labels); pr != "" {
		return fmt.Errorf("%w: %s %s", ErrInvalidArgument, what, pr)
	}
	return nil
}

func validTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return fmt.Errorf("%w: ttl %v is outside [%v, %v]", ErrInvalidArgument, ttl, MinTTL, MaxTTL)
	}
	return nil
}

// checkOutcome returns an ErrInvalidArgument unless o is Success, Failure
// or Blocked, or 0 where the outcome is optional (Release).
func checkOutcome(o Outcome, optional bool) error {
	if (o == 0 && optional) || (o >= Success && o <= Blocked) {
		return nil
	}
	return fmt.Errorf("%w: outcome %d is not SUCCESS, FAILURE or BLOCKED", ErrInvalidArgument, o)
}

// checkSpecs returns the ErrInvalidArgument that Register would return for
// specs, or nil; it reads no pool, so Register runs it before the lock.
func checkSpecs(specs []Spec) error {
	for i, s := range specs {
		if pr := idProblem(s.ID); pr != "" {
			return fmt.Errorf("%w: resources[%d].id %s", ErrInvalidArgument, i, pr)
		}
		if s.Capacity < 0 || s.Capacity > 1<<20 {
			return fmt.Errorf("%w: resources[%d].capacity %d is outside [1, %d]", ErrInvalidArgument, i, s.Capacity, 1<<20)
		}
		if pr := labelsProblem(s.Labels); pr != "" {
			return fmt.Errorf("%w: resources[%d].labels %s", ErrInvalidArgument, i, pr)
		}
		if s.MaxUses < 0 || s.MaxUses > MaxMaxUses {
			return fmt.Errorf("%w: resources[%d].max_uses %d is outside [0, %d]", ErrInvalidArgument, i, s.MaxUses, MaxMaxUses)
		}
		if s.MaxAge < 0 || s.MaxAge > MaxMaxAge {
			return fmt.Errorf("%w: resources[%d].max_age %v is outside [0, %v]", ErrInvalidArgument, i, s.MaxAge, MaxMaxAge)
		}
	}
	return nil
}

// Register adds resources and returns the ids of those it created, in
// specs order: exactly the resources this call added, which a caller that
// must undo the call removes (never one that another call created). It is
// idempotent: a resource that exists already is left unchanged and counted
// in existing, as is a repeat within specs. The batch is validated first;
// if any spec is invalid nothing is registered and the error wraps
// ErrInvalidArgument.
func (p *Pool) Register(specs []Spec) (created []string, existing int, err error) {
	if err := checkSpecs(specs); err != nil {
		return nil, 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.closedErr(); err != nil {
		return nil, 0, err
	}
	if p.gate != nil {
		if err := p.reserve(p.unitsNew(specs), 0); err != nil {
			return nil, 0, err
		}
	}
	now := p.clock.Now()
	for _, s := range specs {
		if _, ok := p.lookup(s.ID); ok {
			existing++
			continue
		}
		p.addResource(s, now.UnixNano())
		created = append(created, s.ID)
		p.emit(Event{Kind: EventRegistered, Resource: s.ID, At: now})
	}
	return created, existing, nil
}

// unitsNew returns the resource units (ResourceUnits) of the resources
// Register(specs) would create: the first spec of each distinct id the pool
// does not hold. A batch of a few is checked for repeats pairwise, a
// larger one through a set.
func (p *Pool) unitsNew(specs []Spec) int {
	var seen map[string]bool
	if len(specs) > 8 {
		seen = make(map[string]bool, len(specs))
	}
	n := 0
	for i, s := range specs {
		if _, ok := p.lookup(s.ID); ok {
			continue
		}
		repeat := false
		if seen != nil {
			repeat = seen[s.ID]
			seen[s.ID] = true
		} else {
			for _, earlier := range specs[:i] {
				if earlier.ID == s.ID {
					repeat = true
					break
				}
			}
		}
		if !repeat {
			n += ResourceUnits(s.ID, s.Labels)
		}
	}
	return n
}

// reserve charges the Gate for state about to be created, or returns an
// ErrOverBudget; the caller holds the write lock.
func (p *Pool) reserve(resources, cells int) error {
	if p.gate == nil || resources+cells == 0 {
		return nil
	}
	if err := p.gate.Reserve(resources, cells); err != nil {
		return fmt.Errorf("%w: %w", ErrOverBudget, err)
	}
	return nil
}

// closedErr returns the ErrPoolClosed of a closed pool, or nil; the caller
// holds the lock.
func (p *Pool) closedErr() error {
	if p.closed == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrPoolClosed, p.closed)
}

// Close ends the pool's life: every later change (Register, Deregister,
// Acquire, Renew, Release, Report) fails with an error wrapping
// ErrPoolClosed and why, and its subscriptions end with why, as do later
// ones. A call that got the pool before it was closed (a tenant deleted, a
// server stepping down) then cannot change it, nor charge its Gate, after
// the caller of Close has settled the pool's budget. Reads still answer.
func (p *Pool) Close(why error) {
	p.mu.Lock()
	p.closed = why
	p.mu.Unlock()
	p.bus.shut(why)
}

// addResource creates a resource; the caller holds the write lock and has
// checked that the id is new.
func (p *Pool) addResource(s Spec, now int64) int32 {
	capacity := int32(s.Capacity)
	if capacity == 0 {
		capacity = 1
	}
	var labels map[string]string
	if len(s.Labels) > 0 {
		labels = maps.Clone(s.Labels)
	}
	var idx int32
	if n := len(p.freeRes); n > 0 {
		idx = p.freeRes[n-1]
		p.freeRes = p.freeRes[:n-1]
	} else {
		grown := len(p.res) == cap(p.res)
		p.res = append(p.res, resource{})
		p.life = append(p.life, lifetime{})
		idx = int32(len(p.res) - 1)
		if grown {
			res := p.res[:cap(p.res)]
			p.resView.Store(&res)
		}
		p.growDense()
	}
	r := &p.res[idx]
	*r = resource{
		id: s.ID, labels: labels, capacity: capacity, availPos: -1,
		gen: r.gen + 1, live: true, agg: counts{upd: now},
		dirty: r.dirty, // a slot freed in this change set is still listed in dirtyRes
	}
	copy(r.idHead[:], s.ID)
	p.life[idx] = lifetime{born: now, maxUses: uint32(s.MaxUses), maxAge: int64(s.MaxAge)}
	r.ownUses = s.MaxUses > 0
	p.scheduleAgeout(idx)
	p.ids.insert(s.ID, idx)
	for k, v := range labels {
		byValue := p.labelIdx[k]
		if byValue == nil {
			byValue = map[string][]int32{}
			p.labelIdx[k] = byValue
		}
		byValue[v] = append(byValue[v], idx)
	}
	p.nresource++
	p.units += ResourceUnits(s.ID, labels)
	p.markResource(idx)
	p.updateAvail(idx)
	return idx
}

// Deregister removes resources with their cells and leases; unknown ids are
// ignored. It returns how many resources and cells were removed.
func (p *Pool) Deregister(ids []string) (removed, cells int, err error) {
	for i, id := range ids {
		if pr := idProblem(id); pr != "" {
			return 0, 0, fmt.Errorf("%w: resource_ids[%d] %s", ErrInvalidArgument, i, pr)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.closedErr(); err != nil {
		return 0, 0, err
	}
	now := p.clock.Now()
	units := 0
	for _, id := range ids {
		idx, ok := p.lookup(id)
		if !ok {
			continue
		}
		cells += int(p.res[idx].ncells)
		units += ResourceUnits(p.res[idx].id, p.res[idx].labels)
		p.removeResource(idx)
		removed++
		p.emit(Event{Kind: EventRemoved, Resource: id, At: now})
	}
	if p.gate != nil && removed > 0 {
		p.gate.Release(units, cells)
	}
	return removed, cells, nil
}

func (p *Pool) removeResource(idx int32) {
	r := &p.res[idx]
	if r.active > 0 {
		var ids []uint64
		p.leases.each(func(id uint64, l leaseRec) {
			if l.res == idx {
				ids = append(ids, id)
			}
		})
		for _, id := range ids {
			p.leases.del(id)
		}
	}
	p.dropCells(idx)
	isIdx := func(x int32) bool { return x == idx }
	for _, cs := range p.ctxs {
		for i := 0; i < cs.nlead; i++ {
			if cs.leaders[i].res == idx {
				copy(cs.leaders[i:cs.nlead], cs.leaders[i+1:cs.nlead])
				cs.nlead--
				break
			}
		}
		cs.probes = slices.DeleteFunc(cs.probes, isIdx)
	}
	p.probeRes = slices.DeleteFunc(p.probeRes, isIdx)
	for k, v := range r.labels {
		byValue := p.labelIdx[k]
		byValue[v] = slices.DeleteFunc(byValue[v], isIdx)
		if len(byValue[v]) == 0 {
			delete(byValue, v)
		}
		if len(byValue) == 0 {
			delete(p.labelIdx, k)
		}
	}
	if r.retired {
		delete(p.retiredWhy, idx)
	}
	if r.q.state != qNone {
		p.nblocked--
	}
	r.live = false
	p.updateAvail(idx)
	p.ids.remove(r.id, idx)
	p.removed = append(p.removed, r.id)
	// dirty stays set while the slot is listed in dirtyRes, so that a reuse
	// within the same change set does not list it twice.
	p.units -= ResourceUnits(r.id, r.labels)
	*r = resource{gen: r.gen, availPos: -1, dirty: r.dirty}
	p.life[idx] = lifetime{}
	p.freeRes = append(p.freeRes, idx)
	p.nresource--
}

// updateAvail puts the resource in or out of the set Acquire draws from: live,
// not retired, with free capacity and not quarantined as a whole.
func (p *Pool) updateAvail(idx int32) {
	r := &p.res[idx]
	want := r.live && !r.retired && r.active < r.capacity && r.q.state == qNone
	switch {
	case want && r.availPos < 0:
		r.availPos = int32(len(p.avail))
		p.avail = append(p.avail, idx)
	case !want && r.availPos >= 0:
		last := len(p.avail) - 1
		moved := p.avail[last]
		p.avail[r.availPos] = moved
		p.res[moved].availPos = r.availPos
		p.avail = p.avail[:last]
		r.availPos = -1
	}
}

// markResource adds the resource to the change set. r.dirty is set exactly
// while idx is listed in dirtyRes, whether or not the slot is live: it is
// cleared only by clearChangesLocked.
func (p *Pool) markResource(idx int32) {
	if r := &p.res[idx]; !r.dirty {
		r.dirty = true
		p.dirtyRes = append(p.dirtyRes, idx)
	}
}

// lookup returns the slot of resource id; the caller holds the lock.
func (p *Pool) lookup(id string) (int32, bool) {
	idx := p.ids.find(id, p.ids.tag(id), p.res, nil)
	return idx, idx >= 0
}

// contextID interns name; the caller holds the write lock and is about to
// store a cell for it. A sparse context whose cells are all gone is freed
// (freeContext) and its id reused, so that the contexts a pool keeps are
// bounded by its cells however many names come and go.
func (p *Pool) contextID(name string) int32 {
	if id, ok := p.findContext(name); ok {
		return id
	}
	if n := len(p.freeCtxs); n > 0 {
		id := p.freeCtxs[n-1]
		p.freeCtxs = p.freeCtxs[:n-1]
		*p.ctxs[id] = contextState{name: name}
		p.ctxIDs[name] = id
		return id
	}
	id := int32(len(p.ctxs))
	p.ctxIDs[name] = id
	p.ctxs = append(p.ctxs, &contextState{name: name})
	if id < maxDense {
		p.ctxNames = append(p.ctxNames, name)
	}
	return id
}

// freeContext forgets sparse context ctx, which has no cell left: its id
// goes to the next new context. Nothing refers to it by id any more but
// stale cooldown entries, which name removed resources and are skipped.
func (p *Pool) freeContext(ctx int32) {
	delete(p.ctxIDs, p.ctxs[ctx].name)
	*p.ctxs[ctx] = contextState{}
	p.freeCtxs = append(p.freeCtxs, ctx)
}

// findContext returns the id of an interned context. A tenant has few
// contexts, and comparing a few short strings is cheaper than hashing one:
// the first maxDense are searched in order before the map.
func (p *Pool) findContext(name string) (int32, bool) {
	for i, n := range p.ctxNames {
		if n == name {
			return int32(i), true
		}
	}
	if len(p.ctxs) <= maxDense {
		return 0, false
	}
	id, ok := p.ctxIDs[name]
	return id, ok
}

func (p *Pool) emit(e Event) { p.bus.publish(e) }

// SetMaxLeases caps the leases outstanding at once; 0 removes the cap. It
// applies to later Acquires; leases already held are kept.
func (p *Pool) SetMaxLeases(n int) {
	p.mu.Lock()
	p.maxLeases = max(n, 0)
	p.mu.Unlock()
}

// SetPolicy changes the pool's quarantine, decay, objective and
// retirement policy live, or returns an error naming the bad field and
// changes nothing. Later outcomes are judged by the new thresholds, against
// the consecutive failures already counted; statistics are decayed lazily,
// so the time since each one's last update is weighed at the new
// half-life; quarantines already running keep their end, and the next one
// uses the new cooldowns and share cap; a new objective ranks the leader
// boards again at once. New MaxUses and MaxAge apply to every resource
// without its own at once: one that has reached them is retired by this
// call.
func (p *Pool) SetPolicy(pol Policy) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.cfg.WithPolicy(pol)
	if err := c.Validate(); err != nil {
		return err
	}
	c = c.WithDefaults()
	// Field by field: the other fields of p.cfg are read without the lock.
	p.cfg.HalfLife, p.hl = c.HalfLife, int64(c.HalfLife)
	p.cfg.FailuresToQuarantine, p.cfg.FailuresToQuarantineWhole = c.FailuresToQuarantine, c.FailuresToQuarantineWhole
	p.cfg.QuarantineBelow, p.cfg.QuarantineMinEvidence = c.QuarantineBelow, c.QuarantineMinEvidence
	p.cfg.CooldownBase, p.cfg.CooldownMax = c.CooldownBase, c.CooldownMax
	p.cfg.Objective = c.Objective
	if perTime := c.Objective == ObjectiveSuccessPerTime; perTime != p.perTime {
		p.perTime = perTime
		p.rescoreLeaders()
	}
	p.cfg.MaxQuarantinedShare = c.MaxQuarantinedShare
	if c.MaxUses != p.cfg.MaxUses || c.MaxAge != p.cfg.MaxAge {
		p.cfg.MaxUses, p.cfg.MaxAge = c.MaxUses, c.MaxAge
		p.applyLifetimes(p.clock.Now().UnixNano())
	}
	return nil
}

// HasResource reports whether the resource exists. It does not allocate.
func (p *Pool) HasResource(id string) bool {
	p.mu.RLock()
	_, ok := p.lookup(id)
	p.mu.RUnlock()
	return ok
}

// HasCell reports whether statistics exist for the resource in the context,
// that is whether a Report for them would reuse state rather than create it.
// It does not allocate.
func (p *Pool) HasCell(resourceID, context string) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	idx, ok := p.lookup(resourceID)
	return ok && p.hasCell(idx, context)
}

// hasCell reports whether resource idx has a cell for context; the caller
// holds the lock.
func (p *Pool) hasCell(idx int32, context string) bool {
	ctx, ok := p.findContext(context)
	return ok && p.findCell(idx, ctx) >= 0
}

// Len returns the number of resources and cells.
func (p *Pool) Len() (resources, cells int) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.nresource, p.ncells
}

// Charge returns what the pool's state costs in its Gate's units: the
// resource units of its resources (ResourceUnits) and its cells, affinity
// bindings included (BindingCells each). It is what a caller of Restore
// accounts.
func (p *Pool) Charge() (resourceUnits, cells int) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.units, p.ncells + len(p.binds.idx)*BindingCells
}

// ActiveLeases returns the number of live leases (some may be past their
// expiry until the next call that processes expiries).
func (p *Pool) ActiveLeases() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.leases.len()
}

// Counters returns the pool's cumulative counters.
func (p *Pool) Counters() Counters {
	p.mu.RLock()
	c := p.counters
	p.mu.RUnlock()
	_, c.DroppedEvents, _ = p.bus.stats()
	return c
}

// Subscribe returns a subscription to the pool's events of the given kinds
// (all when kinds is zero). With after > 0 it first replays the held events
// with a larger sequence number, preceded by an EventGap marker if some were
// already discarded, or if after is beyond the last event (it names an
// event of an earlier pool: a restart or failover numbers events anew). The subscription ends when the caller closes it, when
// its buffer fills (ErrSlowSubscriber) or when the pool closes it.
func (p *Pool) Subscribe(kinds Kinds, after uint64) *Subscription {
	return p.bus.subscribe(kinds, after, p.clock.Now())
}

// CloseSubscriptions ends every subscription with why (for example when the
// tenant is suspended), and every later one at once, until
// OpenSubscriptions.
func (p *Pool) CloseSubscriptions(why error) { p.bus.shut(why) }

// OpenSubscriptions lets subscriptions last again after CloseSubscriptions
// (a suspended tenant reactivated); a closed pool's stay refused.
func (p *Pool) OpenSubscriptions() {
	p.mu.RLock()
	closed := p.closed != nil
	p.mu.RUnlock()
	if !closed {
		p.bus.reopen()
	}
}

// ContextStats are the decayed statistics of one resource in one context.
type ContextStats struct {
	Context             string
	Successes, Failures float64 // decayed counts, Beta(1,1) base included
	SuccessRate         float64 // posterior mean
	// RecentSuccesses and RecentFailures are plain counts of the latest
	// outcomes, at most RecentWindow of them: no prior, no decay, no
	// quarantine history folded in.
	RecentSuccesses, RecentFailures int
	ConsecutiveFailures             int
	BlockedUntil                    time.Time // zero unless quarantined
	// Quarantine is the quarantine state: QuarantineNone, ...Blocked
	// (cooling down until BlockedUntil), ...AwaitingProbe (the cooldown is
	// over; the next Acquire that fits gets a probe lease) or ...Probing (a
	// probe lease is out; its outcome decides).
	Quarantine string
	// Latency is the decayed mean latency of the outcomes that carried one
	// (ReleaseTimed, Report.Latency), to the microsecond, 0 if none did;
	// always 0 in ResourceInfo.Aggregate.
	Latency time.Duration
}

// Quarantine states, as ContextStats.Quarantine and
// ResourceInfo.Quarantine say them.
const (
	QuarantineNone          = "none"
	QuarantineBlocked       = "blocked"
	QuarantineAwaitingProbe = "awaiting_probe"
	QuarantineProbing       = "probing"
)

func quarantineName(state uint8) string {
	switch state {
	case qBlocked:
		return QuarantineBlocked
	case qProbation:
		return QuarantineAwaitingProbe
	case qProbing:
		return QuarantineProbing
	}
	return QuarantineNone
}

// ResourceInfo is a resource's state as read by GetResource and List.
type ResourceInfo struct {
	ID           string
	Capacity     int
	Labels       map[string]string
	ActiveLeases int
	BlockedUntil time.Time // zero unless quarantined as a whole
	Quarantine   string    // of the whole resource, as ContextStats.Quarantine
	Aggregate    ContextStats
	Contexts     []ContextStats // sorted by context
	// State is StateActive or StateRetired; RetiredReason says why a
	// retired resource was ("max_uses 100 reached", "max_age 1h0m0s
	// reached").
	State         string
	RetiredReason string
	// Uses counts the leases granted on the resource; MaxUses and MaxAge
	// are the limits that retire it (its own, or else the pool's; 0: none),
	// MaxAge counted from RegisteredAt.
	Uses         int
	MaxUses      int
	MaxAge       time.Duration
	RegisteredAt time.Time
}

// Get returns one resource, or an error wrapping ErrNotFound.
func (p *Pool) Get(id string) (ResourceInfo, error) {
	if err := validID("id", id); err != nil {
		return ResourceInfo{}, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	idx, ok := p.lookup(id)
	if !ok {
		return ResourceInfo{}, fmt.Errorf("%w: resource %q", ErrNotFound, id)
	}
	return p.infoLocked(idx, p.clock.Now().UnixNano()), nil
}

// List returns up to limit resources with ids greater than after, in id
// order, and whether more follow; a negative limit counts as 0. It sorts the
// ids: it is meant for operators, not for the hot path.
func (p *Pool) List(after string, limit int) (infos []ResourceInfo, more bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	slots := make([]int32, 0, p.nresource)
	for i := range p.res {
		if r := &p.res[i]; r.live && r.id > after {
			slots = append(slots, int32(i))
		}
	}
	slices.SortFunc(slots, func(a, b int32) int { return strings.Compare(p.res[a].id, p.res[b].id) })
	limit = max(limit, 0)
	if len(slots) > limit {
		slots, more = slots[:limit], true
	}
	now := p.clock.Now().UnixNano()
	for _, idx := range slots {
		infos = append(infos, p.infoLocked(idx, now))
	}
	return infos, more
}

func stats(name string, c counts, w recent, consec int32, q quarantine, now, hl int64) ContextStats {
	a, b := c.at(now, hl)
	s := ContextStats{Context: name, Successes: 1 + a, Failures: 1 + b, SuccessRate: mean(a, b), ConsecutiveFailures: int(consec),
		Quarantine: quarantineName(q.state)}
	s.RecentSuccesses, s.RecentFailures = w.counts()
	if q.state == qBlocked {
		s.BlockedUntil = time.Unix(0, q.until)
	}
	return s
}

func (p *Pool) infoLocked(idx int32, now int64) ResourceInfo {
	r := &p.res[idx]
	info := ResourceInfo{
		ID: r.id, Capacity: int(r.capacity), ActiveLeases: int(r.active), Quarantine: quarantineName(r.q.state),
		Aggregate: stats("", r.agg, r.recent, r.consecFail, r.q, now, p.hl),
		State:     StateActive, RetiredReason: p.retiredWhy[idx],
		Uses: int(r.uses), MaxUses: int(p.usesLimit(idx)), MaxAge: time.Duration(p.ageLimit(idx)),
		RegisteredAt: time.Unix(0, p.life[idx].born),
	}
	if r.retired {
		info.State = StateRetired
	}
	if len(r.labels) > 0 {
		info.Labels = maps.Clone(r.labels)
	}
	if r.q.state == qBlocked {
		info.BlockedUntil = time.Unix(0, r.q.until)
	}
	for ci, cs := range p.ctxs {
		if slot := p.findCell(idx, int32(ci)); slot >= 0 {
			c := p.cellAt(slot)
			st := stats(cs.name, c.c, c.recent, c.consecFail, c.q, now, p.hl)
			if c.lat.known() {
				st.Latency = time.Duration(float64(c.lat.mean) * float64(time.Second)).Round(time.Microsecond) // kept as a float32
			}
			info.Contexts = append(info.Contexts, st)
		}
	}
	sort.Slice(info.Contexts, func(i, j int) bool { return info.Contexts[i].Context < info.Contexts[j].Context })
	return info
}
