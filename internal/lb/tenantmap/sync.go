package tenantmap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/lb/haproxy"
)

// Source lists the placements: every tenant's id and the name of the group
// it is placed on. The store implements it; an error means the list is
// unknown (the Syncer then changes nothing).
type Source interface {
	Placements(ctx context.Context) (map[string]string, error)
}

// Fingerprinter is what a Source may also implement to make an unchanged
// tick cheap: a value that changes whenever the placements change (for
// example the count of tenants and the sum of their placement versions).
// While it stays the same and no full check is due, the Syncer lists
// nothing; listing every placement each tick costs the store and this
// process time in proportion to the tenants (BenchmarkSync).
type Fingerprinter interface {
	PlacementsFingerprint(ctx context.Context) (string, error)
}

// Defaults of Config.
const (
	DefaultInterval = 200 * time.Millisecond
	DefaultVerify   = 5 * time.Second
	dialTimeout     = 5 * time.Second
)

// Config configures New.
type Config struct {
	// Source lists the placements. Required.
	Source Source
	// Socket is the stats socket (admin level) of the HAProxy to keep
	// current. Required.
	Socket string
	// File is the map file, as haproxy.cfg names it (inventory
	// haproxy.tenant_map). Required, absolute.
	File string
	// Groups are the groups haproxy.cfg has a backend for (the
	// inventory's); a placement on another group is written all the same
	// (its calls reach the default group's backend until haproxy.cfg has
	// its backend) and logged. Empty: not checked.
	Groups []string
	// Interval is the time between two polls of Source. Default 200ms.
	Interval time.Duration
	// Verify is how often HAProxy's map is read back when the placements
	// have not changed, to repair a change made behind the Syncer's back
	// (a HAProxy restarted on an older file, a "clear map"). Default 5s.
	Verify time.Duration
	// Clock schedules the polls. Default the wall clock.
	Clock clock.Clock
	// Log receives what the Syncer does and every failure (once per
	// change of the failure). Default discards.
	Log *slog.Logger
}

// Syncer keeps one HAProxy's tenant map and the map file equal to the
// placements. It is not safe for concurrent use: one goroutine calls Run,
// or Sync.
type Syncer struct {
	cfg Config

	rt       *haproxy.Runtime  // nil until the first successful dial
	file     map[string]string // the entries File holds, as last written or read; nil if unknown
	applied  map[string]string // what HAProxy held after the last successful sync
	verifyAt time.Time         // on Clock: read HAProxy's map back from then on
	print    string            // the source's fingerprint at the last successful sync, "" if none
	failing  string            // the last failure logged, "" when the last sync succeeded
	unknown  string            // the unknown groups last logged
}

// New checks cfg and returns a Syncer holding no connection yet.
func New(cfg Config) (*Syncer, error) {
	switch {
	case cfg.Source == nil:
		return nil, errors.New("tenantmap: Config.Source is required")
	case cfg.Socket == "":
		return nil, errors.New("tenantmap: Config.Socket is required")
	case !filepath.IsAbs(cfg.File) || filepath.Clean(cfg.File) != cfg.File:
		return nil, fmt.Errorf("tenantmap: Config.File %q is not a clean absolute path", cfg.File)
	case cfg.Interval < 0 || cfg.Verify < 0:
		return nil, errors.New("tenantmap: Config.Interval and Config.Verify must not be negative")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Verify == 0 {
		cfg.Verify = DefaultVerify
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Syncer{cfg: cfg}, nil
}

// Close releases the connection to HAProxy's runtime API.
func (s *Syncer) Close() error {
	if s.rt != nil {
		s.rt.Close()
		s.rt = nil
	}
	return nil
}

// Run syncs at once and then every Interval until ctx ends, and returns
// ctx's error. A failed sync (Source or HAProxy unavailable, a map that
// does not match after the change) is logged and tried again at the next
// tick.
func (s *Syncer) Run(ctx context.Context) error {
	s.report(ctx, s.Sync(ctx))
	clock.Every(ctx, s.cfg.Clock, s.cfg.Interval, func(ctx context.Context) bool {
		s.report(ctx, s.Sync(ctx))
		return true
	})
	return ctx.Err()
}

// report logs a failure once per change of its text, and the recovery;
// not the failure of a pass that ctx's end cut short.
func (s *Syncer) report(ctx context.Context, err error) {
	switch {
	case ctx.Err() != nil:
	case err == nil && s.failing != "":
		s.cfg.Log.Info("tenant map sync recovered")
		s.failing = ""
	case err != nil && err.Error() != s.failing:
		s.failing = err.Error()
		s.cfg.Log.Warn("tenant map sync failing; retrying every interval", "interval", s.cfg.Interval, "err", err)
	}
}

// Sync makes one pass: it lists the placements (unless the Source's
// fingerprint says they have not changed), rewrites the map file
// (atomically, and only if it changes) and applies the difference to
// HAProxy's map through the runtime API, then checks the entries it
// changed; the first pass, the first after a failure and the first after
// each Verify period read and check the whole map instead. A Source error
// changes nothing. The file is written before HAProxy is changed, so that
// a HAProxy restarting in between starts from the new placements.
func (s *Syncer) Sync(ctx context.Context) error {
	var fp string
	if f, ok := s.cfg.Source.(Fingerprinter); ok {
		p, err := f.PlacementsFingerprint(ctx)
		if err != nil {
			return fmt.Errorf("tenant map: the placements' fingerprint: %w", err)
		}
		if p != "" && p == s.print && s.applied != nil && s.cfg.Clock.Now().Before(s.verifyAt) {
			return nil
		}
		fp = p
	}
	s.print = ""
	want, err := s.syncFile(ctx)
	if err != nil {
		return err
	}
	now := s.cfg.Clock.Now()
	full := s.applied == nil || !now.Before(s.verifyAt)
	if !full && maps.Equal(s.applied, want) {
		s.print = fp
		return nil
	}
	if err := s.apply(ctx, want, full); err != nil {
		s.applied = nil // the next sync reads HAProxy's map in full
		return err
	}
	s.applied, s.print = want, fp
	if full {
		// From the end of the read-back: a long first sync is not
		// followed at once by another full one.
		s.verifyAt = s.cfg.Clock.Now().Add(s.cfg.Verify)
	}
	return nil
}

// SyncFile lists the placements and rewrites the map file if it changes,
// without HAProxy: the file to start HAProxy on.
func (s *Syncer) SyncFile(ctx context.Context) error {
	_, err := s.syncFile(ctx)
	return err
}

// syncFile lists the placements, writes the map file if it changes, and
// returns the map's entries.
func (s *Syncer) syncFile(ctx context.Context) (map[string]string, error) {
	placements, err := s.cfg.Source.Placements(ctx)
	if err != nil {
		return nil, fmt.Errorf("tenant map: listing the placements: %w", err)
	}
	want, err := Entries(placements)
	if err != nil {
		return nil, err
	}
	s.checkGroups(placements)
	return want, s.writeFile(want)
}

// checkGroups logs the placements on groups haproxy.cfg has no backend
// for, once per change of the set.
func (s *Syncer) checkGroups(placements map[string]string) {
	if len(s.cfg.Groups) == 0 {
		return
	}
	unknown := map[string]bool{}
	for _, g := range placements {
		if !slices.Contains(s.cfg.Groups, g) {
			unknown[g] = true
		}
	}
	list := strings.Join(slices.Sorted(maps.Keys(unknown)), ",")
	if list != s.unknown {
		s.unknown = list
		if list != "" {
			s.cfg.Log.Warn("tenants are placed on groups haproxy.cfg has no backend for; their calls go to the default group's backend until it has (add the groups' servers to the inventory and render again)", "groups", list)
		}
	}
}

// writeFile replaces the map file with want's if its entries differ.
func (s *Syncer) writeFile(want map[string]string) error {
	if s.file != nil && maps.Equal(s.file, want) {
		return nil
	}
	data := render(want)
	if s.file == nil {
		// First pass: the file as it is, if it is exactly what we write.
		if cur, err := os.ReadFile(s.cfg.File); err == nil && bytes.Equal(cur, data) {
			s.file = want
			return nil
		}
	}
	if err := WriteFile(s.cfg.File, data); err != nil {
		s.file = nil
		return err
	}
	s.file = want
	return nil
}

// WriteFile replaces the map file at path with data atomically (a
// temporary file in the same directory, synced, then renamed over it),
// mode 0644: HAProxy reads it after dropping to its own user.
func WriteFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return fmt.Errorf("tenant map: write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // nothing left to remove after the rename
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("tenant map: write %s: %w", path, err)
	}
	return nil
}

// apply makes HAProxy's map equal to want and checks that it is. With
// full it reads the whole map ("show map") to find the changes and reads
// it all back after them; otherwise it takes the map to be what the last
// sync left (s.applied) and checks only the entries it changed ("get
// map"), so that a move costs HAProxy commands for the changed tenants,
// not for every tenant.
func (s *Syncer) apply(ctx context.Context, want map[string]string, full bool) error {
	if s.rt == nil {
		dctx, cancel := context.WithTimeout(ctx, dialTimeout)
		rt, err := haproxy.Dial(dctx, s.cfg.Socket)
		cancel()
		if err != nil {
			return fmt.Errorf("tenant map: %w", err)
		}
		s.rt = rt
	}
	m, err := s.rt.Map(s.cfg.File)
	if err != nil {
		return fmt.Errorf("tenant map: %w", err)
	}
	var d Changes
	if full {
		have, err := m.Entries()
		if err != nil {
			return fmt.Errorf("tenant map: %w", err)
		}
		d = Diff(have, want)
	} else {
		d = diff(s.applied, nil, want)
	}
	if d.Empty() {
		return nil
	}
	for _, k := range d.Del {
		if err := m.Del(k); err != nil {
			return fmt.Errorf("tenant map: %w", err)
		}
	}
	for _, e := range d.Set {
		if err := m.Set(e.Key, e.Value); err != nil {
			return fmt.Errorf("tenant map: %w", err)
		}
	}
	if err := m.Add(d.Add); err != nil {
		return fmt.Errorf("tenant map: %w", err)
	}
	// The runtime client does not report every refusal: read back.
	if full {
		after, err := m.Entries()
		if err != nil {
			return fmt.Errorf("tenant map: %w", err)
		}
		if rest := Diff(after, want); !rest.Empty() {
			return fmt.Errorf("tenant map: HAProxy's map still differs after the change (%s)", rest)
		}
	} else {
		for _, k := range d.keys() {
			v, ok, err := m.Get(k)
			if err != nil {
				return fmt.Errorf("tenant map: %w", err)
			}
			if w, wanted := want[k]; ok != wanted || v != w {
				return fmt.Errorf("tenant map: HAProxy's map holds %q for tenant %s after the change, want %q", v, k, w)
			}
		}
	}
	s.cfg.Log.Info("tenant map applied", "added", len(d.Add), "changed", len(d.Set), "removed", len(d.Del), "tenants", len(want))
	return nil
}

// Changes are what makes a map equal to another: keys to delete (every
// entry of the key), keys whose value to set, entries to add.
type Changes struct {
	Del []string
	Set []haproxy.MapEntry
	Add []haproxy.MapEntry
}

// Empty reports whether there is nothing to change.
func (c Changes) Empty() bool { return len(c.Del)+len(c.Set)+len(c.Add) == 0 }

// keys returns every key the changes touch.
func (c Changes) keys() []string {
	out := slices.Clone(c.Del)
	for _, e := range c.Set {
		out = append(out, e.Key)
	}
	for _, e := range c.Add {
		out = append(out, e.Key)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// String summarises the changes for a message.
func (c Changes) String() string {
	return fmt.Sprintf("%d to remove, %d to change, %d to add", len(c.Del), len(c.Set), len(c.Add))
}

// Diff returns the changes that make have (a map's entries, as HAProxy
// lists them) equal to want. A key have holds more than once is deleted
// and, if wanted, added again. Each list is sorted by key.
func Diff(have []haproxy.MapEntry, want map[string]string) Changes {
	cur := make(map[string]string, len(have))
	dup := map[string]bool{}
	for _, e := range have {
		if _, seen := cur[e.Key]; seen {
			dup[e.Key] = true
		}
		cur[e.Key] = e.Value
	}
	return diff(cur, dup, want)
}

// diff is Diff on a map: cur holds each key once, dup names the keys
// HAProxy holds more than once.
func diff(cur map[string]string, dup map[string]bool, want map[string]string) Changes {
	var c Changes
	for k, v := range cur {
		w, ok := want[k]
		switch {
		case !ok:
			c.Del = append(c.Del, k)
		case dup[k]:
			c.Del = append(c.Del, k)
			c.Add = append(c.Add, haproxy.MapEntry{Key: k, Value: w})
		case v != w:
			c.Set = append(c.Set, haproxy.MapEntry{Key: k, Value: w})
		}
	}
	for k, w := range want {
		if _, ok := cur[k]; !ok {
			c.Add = append(c.Add, haproxy.MapEntry{Key: k, Value: w})
		}
	}
	byKey := func(a, b haproxy.MapEntry) int { return strings.Compare(a.Key, b.Key) }
	slices.Sort(c.Del)
	slices.SortFunc(c.Set, byKey)
	slices.SortFunc(c.Add, byKey)
	return c
}
