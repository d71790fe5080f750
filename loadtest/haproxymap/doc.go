// Package haproxymap holds the benchmark of docs/scaling.md that measures
// what routing by a tenant map costs the real HAProxy: the memory and
// start time of a map of up to 100,000 tenants, and the CPU per request of
// the map lookup `use_backend %[req.hdr(x-repool-tenant),map(FILE,repool)]`
// (the front end's rule for tenant-sharded groups, see docs/ha.md) beside
// the same requests without it. It has no code of its own.
package haproxymap
