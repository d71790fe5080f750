package haproxy

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNoMap: the running HAProxy has not loaded the map file (its
// configuration does not use it: rendered with one group, or an old file).
var ErrNoMap = errors.New("HAProxy has not loaded this map file")

// MapEntry is one entry of a map as the running HAProxy holds it.
type MapEntry struct{ Key, Value string }

// Map is a map file loaded by the running HAProxy, addressed by its
// runtime id for the commands of one sync. The id changes when HAProxy
// restarts: look the map up again (Runtime.Map) for each sync.
type Map struct {
	r    *Runtime
	file string
	ref  string // "#<id>"
}

// mapPayloadMax bounds one "add map" payload (client-native's buffer is
// 8192 bytes, the command included).
const mapPayloadMax = 7 * 1024

// Map finds the map HAProxy loaded from file (an absolute path, as in
// haproxy.cfg) with "show map". Errors wrap ErrNoMap or ErrRuntime.
func (r *Runtime) Map(file string) (*Map, error) {
	maps, err := r.rt.ShowMaps()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: show map: %v", ErrRuntime, r.socket, err)
	}
	for _, m := range maps {
		if m != nil && m.File == file {
			return &Map{r: r, file: file, ref: "#" + m.ID}, nil
		}
	}
	return nil, fmt.Errorf("%w: %s (is haproxy.cfg rendered with more than one group?)", ErrNoMap, file)
}

// Entries lists the map's entries in HAProxy's order ("show map"). A key
// HAProxy holds twice is listed twice.
func (m *Map) Entries() ([]MapEntry, error) {
	entries, err := m.r.rt.ShowMapEntries(m.ref)
	if err != nil {
		return nil, m.fail("show map", err)
	}
	out := make([]MapEntry, 0, len(entries))
	for _, e := range entries {
		if e != nil {
			out = append(out, MapEntry{Key: e.Key, Value: e.Value})
		}
	}
	return out, nil
}

// Add adds entries ("add map" with payloads of up to 7 KiB each). HAProxy
// keeps a second entry for a key it already holds: add only new keys.
// Keys and values must not contain white space.
//
// The runtime client does not report every refusal of HAProxy's: check
// the result with Entries.
func (m *Map) Add(entries []MapEntry) error {
	var b strings.Builder
	flush := func() error {
		if b.Len() == 0 {
			return nil
		}
		err := m.r.rt.AddMapPayload(m.ref, b.String())
		b.Reset()
		return err
	}
	for _, e := range entries {
		if err := checkWord(e.Key); err != nil {
			return err
		}
		if err := checkWord(e.Value); err != nil {
			return err
		}
		line := e.Key + " " + e.Value + "\n"
		if b.Len()+len(line) > mapPayloadMax {
			if err := flush(); err != nil {
				return m.fail("add map", err)
			}
		}
		b.WriteString(line)
	}
	if err := flush(); err != nil {
		return m.fail("add map", err)
	}
	return nil
}

// Get returns the value HAProxy holds for key ("get map"), and whether it
// holds one.
func (m *Map) Get(key string) (string, bool, error) {
	if err := checkWord(key); err != nil {
		return "", false, err
	}
	out, err := m.r.rt.ExecuteRaw("get map " + m.ref + " " + key)
	if err != nil || len(out) != 1 {
		return "", false, m.fail("get map", fmt.Errorf("%v (%d answers)", err, len(out)))
	}
	// type=str, case=sensitive, found=yes, idx=tree, key="K", value="V", type="str"
	// type=str, case=sensitive, found=no
	answer := strings.TrimSpace(out[0])
	switch {
	case strings.Contains(answer, "found=no"):
		return "", false, nil
	case !strings.Contains(answer, "found=yes"):
		return "", false, m.fail("get map", fmt.Errorf("unexpected answer %q", answer))
	}
	var k, v string
	var hasK, hasV bool
	for _, field := range strings.Split(answer, ", ") {
		name, val, _ := strings.Cut(field, "=")
		switch name {
		case "key":
			k, hasK = strings.Trim(val, `"`), true
		case "value":
			v, hasV = strings.Trim(val, `"`), true
		}
	}
	if !hasK || !hasV || k != key {
		return "", false, m.fail("get map", fmt.Errorf("unexpected answer %q", answer))
	}
	return v, true, nil
}

// Set changes the value of every entry of key ("set map"). Like Add, its
// result is to be checked with Entries.
func (m *Map) Set(key, value string) error {
	if err := checkWord(key); err != nil {
		return err
	}
	if err := checkWord(value); err != nil {
		return err
	}
	if err := m.r.rt.SetMapEntry(m.ref, key, value); err != nil {
		return m.fail("set map", err)
	}
	return nil
}

// Del removes every entry of key ("del map"). Like Add, its result is to
// be checked with Entries.
func (m *Map) Del(key string) error {
	if err := checkWord(key); err != nil {
		return err
	}
	if err := m.r.rt.DeleteMapEntry(m.ref, key); err != nil {
		return m.fail("del map", err)
	}
	return nil
}

func (m *Map) fail(cmd string, err error) error {
	return fmt.Errorf("%w: %s: %s %s (%s): %v", ErrRuntime, m.r.socket, cmd, m.ref, m.file, err)
}

// checkWord refuses what would change a runtime API command's meaning.
func checkWord(s string) error {
	if s == "" || strings.ContainsAny(s, " \t\r\n;\\") {
		return fmt.Errorf("map entry %q: want a non-empty word without white space, ';' or '\\'", s)
	}
	return nil
}
