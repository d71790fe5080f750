// Package tenantmap keeps HAProxy's tenant map — tenant id -> the backend
// of the group the tenant is placed on — equal to the store's placements,
// so that the gRPC frontend sends each call (by its x-repool-tenant entry)
// to the active server of the tenant's group.
//
// Render and Parse are the map file; Syncer is the loop that polls the
// placements and applies the difference to a running HAProxy through its
// runtime API (add/set/del map) and to the map file, which HAProxy reads
// when it starts. Only tenants placed on a group other than the default
// one are in the map: the frontend sends the others, and calls without
// the entry, to the default group's backend.
package tenantmap

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/repool/repool/internal/lb/haproxy"
	"github.com/repool/repool/internal/lb/inventory"
	"github.com/repool/repool/internal/store"
)

// ErrInvalid is wrapped by the errors about a placement or a map file's
// content.
var ErrInvalid = errors.New("invalid tenant map")

// Header starts every map file Render writes.
const Header = "# repool tenant map: tenant id -> group backend. Written by `server haproxy sync-placements`\n" +
	"# from the store's placements; do not edit (tenants absent here go to backend repool).\n"

// MaxLine bounds a map file's line in Parse: a tenant id, a space and a
// backend name are far shorter.
const MaxLine = 4096

// Entries returns the map's entries for placements (tenant id -> group
// name): tenant id -> haproxy.BackendFor(group), for the tenants placed on
// a group other than the default one. An invalid tenant id or group name
// is an error wrapping ErrInvalid that names it (the first one in tenant
// id order).
func Entries(placements map[string]string) (map[string]string, error) {
	out := make(map[string]string)
	backends := map[string]string{} // group -> backend, checked once per group
	bad, hasBad := "", false
	for id, g := range placements {
		b, ok := backends[g]
		if !ok {
			if inventory.ValidGroup(g) {
				b = haproxy.BackendFor(g)
			}
			backends[g] = b
		}
		if b == "" || store.ValidateTenantID(id) != nil {
			if !hasBad || id < bad {
				bad, hasBad = id, true
			}
			continue
		}
		if g != inventory.DefaultGroup {
			out[id] = b
		}
	}
	if hasBad {
		if err := store.ValidateTenantID(bad); err != nil {
			return nil, fmt.Errorf("%w: placement of tenant %q: the tenant id is not valid", ErrInvalid, bad)
		}
		return nil, fmt.Errorf("%w: placement of tenant %s: %q is not a group name", ErrInvalid, bad, placements[bad])
	}
	return out, nil
}

// Render returns the map file for placements (tenant id -> group name):
// Header, then one line "<tenant id> repool_<group>" per tenant placed on
// a group other than the default one, sorted by tenant id. Errors are
// Entries'.
func Render(placements map[string]string) ([]byte, error) {
	entries, err := Entries(placements)
	if err != nil {
		return nil, err
	}
	return render(entries), nil
}

// render writes entries (tenant id -> backend) as a map file.
func render(entries map[string]string) []byte {
	var b bytes.Buffer
	b.WriteString(Header)
	for _, id := range slices.Sorted(maps.Keys(entries)) {
		b.WriteString(id)
		b.WriteByte(' ')
		b.WriteString(entries[id])
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// Parse reads a map file as Render writes it and returns its placements
// (tenant id -> group name). Blank lines and lines starting with '#' are
// skipped, as HAProxy does. Every other line must be a valid tenant id and
// a group's backend (haproxy.BackendFor of a group other than the default
// one) separated by white space, each tenant at most once. Errors wrap
// ErrInvalid and name the line.
func Parse(data []byte) (map[string]string, error) {
	out := make(map[string]string)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 256), MaxLine)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("%w: line %d: want \"<tenant id> <backend>\", got %d fields", ErrInvalid, n, len(f))
		}
		if err := store.ValidateTenantID(f[0]); err != nil {
			return nil, fmt.Errorf("%w: line %d: %q is not a tenant id", ErrInvalid, n, f[0])
		}
		g, ok := haproxy.GroupOf(f[1])
		if !ok || g == inventory.DefaultGroup {
			return nil, fmt.Errorf("%w: line %d: %q is not the backend of a group other than %q", ErrInvalid, n, f[1], inventory.DefaultGroup)
		}
		if _, dup := out[f[0]]; dup {
			return nil, fmt.Errorf("%w: line %d: tenant %s is listed twice", ErrInvalid, n, f[0])
		}
		out[f[0]] = g
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return out, nil
}
