package storetest

import (
	"fmt"
	"math"

	"github.com/repool/repool/internal/store"
)

// Synthetic returns a deterministic Full checkpoint of resources resources
// with contexts cells each, in the order LoadCheckpoint returns them
// (resources by id, cells by resource then context). seed varies the
// numbers so that two tenants' checkpoints differ.
func Synthetic(resources, contexts int, seed int64) store.Checkpoint {
	cp := store.Checkpoint{
		Full:       true,
		FencingHWM: uint64(seed)<<40 | uint64(resources),
		Resources:  make([]store.ResourceRow, resources),
		Cells:      make([]store.CellRow, 0, resources*contexts),
	}
	ctxs := make([]string, contexts)
	for j := range ctxs {
		ctxs[j] = fmt.Sprintf("ctx-%02d", j)
	}
	base := int64(1_700_000_000_000_000_000) + seed*1_000_000
	for i := range cp.Resources {
		id := fmt.Sprintf("res-%07d", i)
		r := store.ResourceRow{
			ID:                  id,
			Capacity:            int32(1 + i%4),
			Alpha:               float64(i%97) + 0.5 + float64(seed),
			Beta:                float64(i%13) + 0.25,
			UpdatedAt:           base + int64(i),
			ConsecutiveFailures: int32(i % 3),
			CooldownLevel:       int32(i % 5),
		}
		if i%7 == 0 {
			r.BlockedUntil = base + 1_000_000_000
			r.Imposed = i%14 == 0
		}
		r.RegisteredAt, r.Uses, r.Recent = base-int64(i), int64(i%50), int64(i)<<3|1<<40
		if i%5 == 0 {
			r.MaxUses, r.MaxAge, r.Retired = 100, 3_600_000_000_000, "max_uses 100 reached"
		}
		if i%2 == 0 {
			r.Labels = map[string]string{"region": fmt.Sprintf("eu-%d", i%3), "kind": "proxy"}
		}
		cp.Resources[i] = r
		for j, c := range ctxs {
			cp.Cells = append(cp.Cells, store.CellRow{
				ResourceID:          id,
				Context:             c,
				Alpha:               float64((i+j)%89) + 1.0/3.0,
				Beta:                math.Sqrt(float64(i + j)),
				UpdatedAt:           base + int64(i*contexts+j),
				ConsecutiveFailures: int32(j),
				BlockedUntil:        int64(j%2) * base,
				CooldownLevel:       int32(j % 3),
				Recent:              int64(i+j) | 1<<62,
			})
		}
	}
	return cp
}

// Touch returns an incremental checkpoint that changes every nth cell of
// full (alpha and beta incremented, UpdatedAt advanced) and the resources
// of those cells, with FencingHWM raised by one. It does not modify full.
func Touch(full store.Checkpoint, n int) store.Checkpoint {
	inc := store.Checkpoint{FencingHWM: full.FencingHWM + 1}
	byID := make(map[string]int, len(full.Resources))
	for i, r := range full.Resources {
		byID[r.ID] = i
	}
	touched := make(map[string]bool)
	for i := 0; i < len(full.Cells); i += n {
		c := full.Cells[i]
		c.Alpha++
		c.Beta++
		c.UpdatedAt += 1_000_000
		inc.Cells = append(inc.Cells, c)
		if !touched[c.ResourceID] {
			touched[c.ResourceID] = true
			r := full.Resources[byID[c.ResourceID]]
			r.Alpha++
			r.UpdatedAt += 1_000_000
			inc.Resources = append(inc.Resources, r)
		}
	}
	return inc
}

// Apply returns the pool state that results from saving cp over st, the
// way a store applies it. It does not modify st or cp.
func Apply(st store.PoolState, cp store.Checkpoint) store.PoolState {
	out := store.PoolState{HasCheckpoint: true, FencingHWM: max(st.FencingHWM, cp.FencingHWM)}
	res := make(map[string]store.ResourceRow)
	type cellKey struct{ r, c string }
	cells := make(map[cellKey]store.CellRow)
	if !cp.Full {
		for _, r := range st.Resources {
			res[r.ID] = r
		}
		for _, c := range st.Cells {
			cells[cellKey{c.ResourceID, c.Context}] = c
		}
		for _, id := range cp.Removed {
			delete(res, id)
			for k := range cells {
				if k.r == id {
					delete(cells, k)
				}
			}
		}
	}
	for _, r := range cp.Resources {
		res[r.ID] = r
	}
	for _, c := range cp.Cells {
		cells[cellKey{c.ResourceID, c.Context}] = c
	}
	for _, r := range res {
		out.Resources = append(out.Resources, r)
	}
	for _, c := range cells {
		out.Cells = append(out.Cells, c)
	}
	sortState(&out)
	return out
}
