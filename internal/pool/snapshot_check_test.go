package pool

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestCheckSortedAndShuffledAgree: Check answers the same for a store's
// sorted snapshot (checked without maps) and for the same snapshot in any
// order (checked with maps), valid or with one defect, and names the
// defect.
func TestCheckSortedAndShuffledAgree(t *testing.T) {
	valid := func() Snapshot {
		s := Snapshot{LastToken: 1, LastLease: 1, Leases: []LeaseState{{ID: 1, Token: 1, Resource: "r007", Context: "a"}}}
		for i := 0; i < 50; i++ {
			id := fmt.Sprintf("r%03d", i)
			s.Resources = append(s.Resources, ResourceState{ID: id, Capacity: 1})
			for _, c := range []string{"a", "b"} {
				s.Cells = append(s.Cells, CellState{Resource: id, Context: c})
			}
		}
		return s
	}
	defects := map[string]func(*Snapshot){
		"none":             func(*Snapshot) {},
		"repeated id":      func(s *Snapshot) { s.Resources[10].ID = s.Resources[11].ID },
		"unknown resource": func(s *Snapshot) { s.Cells[41].Resource = "r999" },
		"repeated cell":    func(s *Snapshot) { s.Cells[21].Context = s.Cells[20].Context },
		"lease unknown":    func(s *Snapshot) { s.Leases[0].Resource = "zzz" },
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for name, defect := range defects {
		s := valid()
		defect(&s)
		sortedErr := s.Check()
		shuffled := Snapshot{LastToken: s.LastToken, LastLease: s.LastLease, Leases: s.Leases,
			Resources: append([]ResourceState(nil), s.Resources...), Cells: append([]CellState(nil), s.Cells...)}
		rng.Shuffle(len(shuffled.Resources), func(i, j int) {
			shuffled.Resources[i], shuffled.Resources[j] = shuffled.Resources[j], shuffled.Resources[i]
		})
		rng.Shuffle(len(shuffled.Cells), func(i, j int) { shuffled.Cells[i], shuffled.Cells[j] = shuffled.Cells[j], shuffled.Cells[i] })
		shuffledErr := shuffled.Check()
		if (sortedErr == nil) != (name == "none") || (shuffledErr == nil) != (name == "none") {
			t.Fatalf("%s: Check(sorted) = %v, Check(shuffled) = %v", name, sortedErr, shuffledErr)
		}
		if sortedErr != nil && (!errors.Is(sortedErr, ErrInvalidArgument) || !errors.Is(shuffledErr, ErrInvalidArgument)) {
			t.Fatalf("%s: errors %v / %v, want ErrInvalidArgument", name, sortedErr, shuffledErr)
		}
	}
}
