package pool

// Quarantined returns how many live resources are quarantined now for
// every context (blocked, awaiting a probe or being probed) and how many
// cells (a resource in one context) are. It scans the pool under the read
// lock, O(resources + cell slots): it is for a metrics scrape, not for the
// request path.
func (p *Pool) Quarantined() (resources, cells int) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for i := range p.res {
		if r := &p.res[i]; r.live && r.q.state != qNone {
			resources++
		}
	}
	for _, slots := range [][]cell{p.dense, p.sparse} {
		for i := range slots {
			if c := &slots[i]; c.live && c.q.state != qNone {
				cells++
			}
		}
	}
	return resources, cells
}
