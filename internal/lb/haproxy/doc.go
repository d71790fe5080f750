// Package haproxy renders repool's haproxy.cfg from the LB inventory with
// haproxytech/client-native v5's configuration API (Render), and drives a
// running HAProxy's servers through client-native's runtime API client on
// the stats socket (Dial, Runtime: status, drain, ready, maint, and the
// tenant map).
//
// The configuration: HAProxy running as its own user with maxconn bounds
// and explicit timeouts, a gRPC frontend on the VIP (h2c, or with the
// inventory's tls section TLS terminated there and re-encrypted to the
// servers, checks included), a monitor frontend whose monitor-uri Keepalived's track script checks,
// and one backend whose health check GETs /readyz/active on each server's
// HTTP port over HTTP/1 (check-proto h1 on every server line: on
// default-server it would be ignored and the checks would speak HTTP/2) and
// expects 200 or 404 (CheckExpect), with disable-on-404 so that a healthy
// standby is NOLB rather than DOWN, and an agent check on the same port
// (package agent) whose 0% weight keeps a standby coming back from DOWN
// out of the load balancing until the next check makes it NOLB.
//
// With servers in more than one group (tenant-sharded groups), each group
// has such a backend (BackendFor: Backend for the default group,
// Backend_<group> for the others), and the gRPC frontend picks one by the
// call's x-repool-tenant entry in the tenant map file (TenantRule), the
// default group's for a call without the entry or a tenant not in the map.
// Map drives that map in the running HAProxy (show/get/add/set/del map);
// package tenantmap keeps it equal to the placements.
//
// Every directive goes through client-native's models; none needed its raw
// configuration API. Package haproxytest runs the real HAProxy for tests.
package haproxy
