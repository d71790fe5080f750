package store

import "fmt"

// bindingsProblem checks binding rows and dropped keys: valid context, key
// and resource id, and each (context, key) once among the rows.
func bindingsProblem(rows []BindingRow, unbound []BindingKey) error {
	seen := make(map[BindingKey]bool, len(rows))
	for i, b := range rows {
		what := fmt.Sprintf("binding %d", i)
		if err := rowIDProblem(what+" context", b.Context); err != nil {
			return err
		}
		if err := rowIDProblem(what+" key", b.Key); err != nil {
			return err
		}
		if err := rowIDProblem(what+" resource id", b.ResourceID); err != nil {
			return err
		}
		k := BindingKey{b.Context, b.Key}
		if seen[k] {
			return fmt.Errorf("%s: (%s, %s) repeats", what, quote(b.Context), quote(b.Key))
		}
		seen[k] = true
	}
	for i, k := range unbound {
		what := fmt.Sprintf("unbound key %d", i)
		if err := rowIDProblem(what+" context", k.Context); err != nil {
			return err
		}
		if err := rowIDProblem(what+" key", k.Key); err != nil {
			return err
		}
	}
	return nil
}
