// Package budget shares a process-wide state budget among tenants.
//
// A multi-tenant server keeps per-tenant state in memory: resources and
// cells (see internal/pool). Every Kind of state has a global budget, the
// safety limit that protects the process's heap, and every tenant may have
// a reservation and a ceiling for it:
//
//   - the reservation is always available to the tenant, whatever the other
//     tenants use; the sum of all reservations never exceeds the budget;
//   - the ceiling is never exceeded by Reserve, whatever is free; a tenant
//     without one has the default ceiling (Config.DefaultMaxResources and
//     DefaultMaxCells), which a server sets to a share of the budget so
//     that no tenant left at the defaults can take all of it;
//   - the rest of the budget (budget − all reservations − everything used
//     beyond reservations) is a shared pool that any tenant may draw on, up
//     to its ceiling, first come first served.
//
// A tenant's units come from its reservation first and from the shared pool
// only beyond it, and Release returns shared units first, so a tenant within
// its reservation never touches the shared pool and is never refused because
// of what others do.
//
// # Lifecycle
//
// Only the creation of new state is gated: a caller calls Reserve before it
// registers a resource or stores a new cell, and Release when state goes
// away (or when the creation it reserved for fails). Reuse of existing state
// needs no reservation. On start-up the server calls SetLimits for every
// tenant and then Account with the counts it restored, before it serves
// traffic; Account never refuses, because restored state is never dropped.
// When a tenant's delete commits, Forget returns all its units and drops its
// limits.
//
// # Concurrency
//
// A Budget is safe for concurrent use. Reserve, Release and Account take no
// lock: each tenant keeps its usage and reservation of a kind in one atomic
// word, and each kind keeps one atomic counter of committed units (all
// reservations plus everything drawn from the shared pool); both are changed
// with compare-and-swap loops. The committed counter is always changed
// first when units are taken and last when they are given back, so that
// concurrent calls may see it a little too high (and refuse a request that
// a moment later would fit) but never too low: the budget is never
// overdrawn. SetLimits and Forget are serialised by a mutex among
// themselves; they too leave the hot path lock-free.
//
// # Errors
//
// Errors wrap ErrInvalidArgument (bad input; nothing changed), ErrExhausted
// (a limit refused the request; nothing changed; from Reserve, errors.As
// gives an *ExhaustedError that names the kind and the bound) or
// ErrOverRelease (a Release returned more than the tenant held; the release
// was applied, clamped at zero).
package budget
