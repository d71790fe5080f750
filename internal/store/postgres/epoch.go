package postgres

import "time"

// epochFloorBase is the time from which epochFloor counts minutes.
var epochFloorBase = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// epochFloor returns the lowest epoch BumpEpoch hands out at now: one more
// than the whole minutes since epochFloorBase.
//
// Fencing tokens and lease ids carry the epoch in their upper bits, and
// every start and every failover raises it, so tokens keep increasing as
// long as the epoch does. The epoch lives in the database; a database
// restored from an older copy (a dump, a snapshot, a replica promoted from
// behind) has an older one, and the next start would take an epoch that
// was already used and hand out tokens below ones already handed out. The
// clock is what a restore does not take back: each epoch is at least the
// minutes elapsed, so the next epoch after a restore is above every epoch
// handed out before, as long as the counter was not ahead of the clock.
// It runs ahead only when epochs are taken faster than one a minute (each
// extra start or failover within a minute puts it a minute ahead; the lead
// wears off a minute a minute); a restore followed by a start within that
// lead can still go back. The floor also trusts the servers' clocks (a
// clock set back by more than the lead defeats it). The epoch space (2^23
// epochs, pool.MaxEpoch) lasts, one a minute, until December 2041.
// docs/server.md says how to restore a copy.
func epochFloor(now time.Time) uint32 {
	if now.Before(epochFloorBase) {
		return 1
	}
	return uint32(now.Sub(epochFloorBase)/time.Minute) + 1
}
