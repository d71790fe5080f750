package haproxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	cnruntime "github.com/haproxytech/client-native/v5/runtime"
	rtopts "github.com/haproxytech/client-native/v5/runtime/options"

	"github.com/repool/repool/internal/lb/inventory"
)

// AdminState is a server's administrative state, set through the runtime
// API with "set server <backend>/<name> state <state>".
type AdminState string

// Administrative states.
const (
	// Ready: the server takes traffic again when its health check passes.
	Ready AdminState = "ready"
	// Drain: the server keeps its sessions but gets no new ones.
	Drain AdminState = "drain"
	// Maint: the server is out of rotation and not checked.
	Maint AdminState = "maint"
)

// Status is a server's state as HAProxy's "show stat" reports it, reduced to
// one word.
type Status string

// Statuses of a server. Transitional states ("UP 1/2", "DOWN 1/2") are
// reported as the state they are still in.
const (
	StatusUp    Status = "UP"    // passes its check at a weight: takes traffic
	StatusNOLB  Status = "NOLB"  // healthy standby (404): no new traffic
	StatusDown  Status = "DOWN"  // fails its check (503, refused, timeout) or its agent says down
	StatusMaint Status = "MAINT" // set to maint
	// StatusDrain: set to drain, or up at weight 0 (HAProxy's "show stat"
	// says UP): a standby on its way back from DOWN, between its agent's
	// "up 0%" and the next check's 404 (package agent), or a server just
	// made active, before its agent's "up 100%".
	StatusDrain Status = "DRAIN"
)

// ServerStatus is one server of a group's backend.
type ServerStatus struct {
	Name string
	// Group is the server's group, from its backend (GroupOf).
	Group  string
	Addr   string // address:port HAProxy sends traffic to
	Status Status
	// Raw is HAProxy's own status text, e.g. "UP", "DOWN 1/2",
	// "MAINT (via repool/x)".
	Raw string
	// CheckStatus is the last health check's result, e.g. "L7OK" (200, or
	// 404 from a DOWN server), "L7OKC" (404 with disable-on-404:
	// conditionally OK, so NOLB), "L7STS" (another status), "L4CON"
	// (connection refused), "L7TOUT" (timed out).
	CheckStatus string
	// CheckCode is the HTTP status of the last check, 0 if none.
	CheckCode int
	// Weight is the server's current effective weight.
	Weight int
	// Admin is the administrative state set through the runtime API. A
	// drained standby still shows Status NOLB: Admin tells it is drained.
	Admin AdminState
}

// Errors of Runtime.
var (
	// ErrLastUp: the drain or maint would leave the server's backend (its
	// group) without an UP server; SetState's force does it anyway
	// (`server haproxy drain --force`).
	ErrLastUp = errors.New("refusing to take the last UP server out of rotation")
	// ErrUnknownServer: no group's backend has a server of that name.
	ErrUnknownServer = errors.New("no such server")
	// ErrRuntime wraps failures of the runtime API itself (socket
	// unreachable, command rejected by HAProxy).
	ErrRuntime = errors.New("haproxy runtime API")
)

// Runtime drives one HAProxy through its runtime API (stats socket, admin
// level), using client-native's runtime client.
//
// Methods are safe for concurrent use (client-native sends one command at a
// time over a fresh connection each) until Close. A Runtime must not be used
// after Close: client-native's command loop has stopped, and a call would
// block forever.
type Runtime struct {
	socket string
	rt     cnruntime.Runtime
	cancel context.CancelFunc // stops client-native's command goroutine
}

// Dial connects to the stats socket at path and checks that HAProxy
// answers. The returned Runtime owns a goroutine of client-native's; Close
// stops it. Errors wrap ErrRuntime.
func Dial(ctx context.Context, socket string) (*Runtime, error) {
	// client-native's command loop lives until this context ends; it is not
	// ctx, which only bounds Dial.
	loop, cancel := context.WithCancel(context.WithoutCancel(ctx))
	type result struct {
		rt  cnruntime.Runtime
		err error
	}
	done := make(chan result, 1)
	go func() {
		rt, err := cnruntime.New(loop, rtopts.Socket(socket))
		done <- result{rt, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			cancel()
			return nil, fmt.Errorf("%w: %s: %v", ErrRuntime, socket, r.err)
		}
		return &Runtime{socket: socket, rt: r.rt, cancel: cancel}, nil
	case <-ctx.Done():
		// client-native's own 30 s socket timeout ends the goroutine.
		go func() { <-done; cancel() }()
		return nil, fmt.Errorf("%w: %s: %w", ErrRuntime, socket, ctx.Err())
	}
}

// Close stops client-native's command goroutine. It is idempotent.
func (r *Runtime) Close() error {
	r.cancel()
	return nil
}

// Servers lists the servers of every group's backend (Backend, then the
// others in configuration order), each backend's in configuration order,
// from "show stat" and "show servers state". Errors wrap ErrRuntime.
func (r *Runtime) Servers() ([]ServerStatus, error) {
	var out []ServerStatus
	found := false
	for _, coll := range r.rt.GetStats() {
		if coll == nil {
			continue
		}
		if coll.Error != "" {
			return nil, fmt.Errorf("%w: %s: show stat: %s", ErrRuntime, r.socket, coll.Error)
		}
		for _, st := range coll.Stats {
			if st == nil || st.Type != "server" || st.Stats == nil {
				continue
			}
			group, ok := GroupOf(st.BackendName)
			if !ok {
				continue
			}
			found = found || st.BackendName == Backend
			s := st.Stats
			out = append(out, ServerStatus{
				Name:        st.Name,
				Group:       group,
				Addr:        s.Addr,
				Status:      statusOf(s.Status, deref(s.Weight)),
				Raw:         s.Status,
				CheckStatus: strings.TrimPrefix(s.CheckStatus, "* "),
				CheckCode:   int(deref(s.CheckCode)),
				Weight:      int(deref(s.Weight)),
			})
		}
	}
	if !found {
		return nil, fmt.Errorf("%w: %s: show stat lists no backend %q", ErrRuntime, r.socket, Backend)
	}
	admin := map[string]map[string]AdminState{} // backend -> server -> state
	for i, s := range out {
		backend := BackendFor(s.Group)
		if admin[backend] == nil {
			states, err := r.rt.GetServersState(backend)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: show servers state %s: %v", ErrRuntime, r.socket, backend, err)
			}
			admin[backend] = map[string]AdminState{}
			for _, st := range states {
				if st != nil {
					admin[backend][strings.ToLower(st.Name)] = AdminState(st.AdminState)
				}
			}
		}
		out[i].Admin = admin[backend][s.Name]
	}
	// The default group first, as haproxy.cfg has it; the stable sort
	// keeps configuration order otherwise.
	slices.SortStableFunc(out, func(a, b ServerStatus) int {
		return cmp.Compare(b2i(a.Group != inventory.DefaultGroup), b2i(b.Group != inventory.DefaultGroup))
	})
	return out, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// SetState sets the administrative state of server name (in its group's
// backend). Unless force is set, it refuses (ErrLastUp) to drain or maint
// the only server of its group that is UP, which would leave the group's
// tenants without an active server. The
// check and the change are two commands: a concurrent change of another
// server's state between them is not seen.
//
// Errors wrap ErrUnknownServer, ErrLastUp or ErrRuntime.
func (r *Runtime) SetState(name string, state AdminState, force bool) error {
	switch state {
	case Ready, Drain, Maint:
	default:
		return fmt.Errorf("unknown state %q (want ready, drain or maint)", state)
	}
	servers, err := r.Servers()
	if err != nil {
		return err
	}
	var target *ServerStatus
	for i, s := range servers {
		if s.Name == name {
			target = &servers[i]
		}
	}
	if target == nil {
		return fmt.Errorf("%w: %s", ErrUnknownServer, name)
	}
	up := 0
	for _, s := range servers {
		if s.Group == target.Group && s.Status == StatusUp {
			up++
		}
	}
	backend := BackendFor(target.Group)
	if state != Ready && !force && target.Status == StatusUp && up == 1 {
		return fmt.Errorf("%s %s/%s: %w", state, backend, name, ErrLastUp)
	}
	if err := r.rt.SetServerState(backend, name, string(state)); err != nil {
		return fmt.Errorf("%w: %s: set server %s/%s state %s: %v", ErrRuntime, r.socket, backend, name, state, err)
	}
	return nil
}

// statusOf is parseStatus, except that a server UP at weight 0 takes no
// traffic: StatusDrain.
func statusOf(raw string, weight int64) Status {
	st := parseStatus(raw)
	if st == StatusUp && weight == 0 && raw != "no check" {
		return StatusDrain
	}
	return st
}

// parseStatus reduces "show stat"'s status column to a Status.
func parseStatus(raw string) Status {
	switch word, _, _ := strings.Cut(raw, " "); word {
	case "UP":
		return StatusUp
	case "no": // "no check": up, unchecked
		return StatusUp
	case "NOLB":
		return StatusNOLB
	case "DOWN":
		return StatusDown
	case "MAINT":
		return StatusMaint
	case "DRAIN":
		return StatusDrain
	default:
		return Status(raw)
	}
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
