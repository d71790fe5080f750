package store

import (
	"encoding/json"
	"fmt"
)

// bindingJSON is a BindingRow as the stores keep it: one JSON array per
// tenant (checkpoint_meta.affinity), short names for the bytes' sake.
type bindingJSON struct {
	Context  string `json:"c"`
	Key      string `json:"k"`
	Resource string `json:"r"`
	Expires  int64  `json:"e"`
	Failed   bool   `json:"f,omitempty"`
}

// EncodeBindings returns the stored form of rows: "" for none.
func EncodeBindings(rows []BindingRow) string {
	if len(rows) == 0 {
		return ""
	}
	out := make([]bindingJSON, len(rows))
	for i, r := range rows {
		out[i] = bindingJSON{r.Context, r.Key, r.ResourceID, r.ExpiresAt, r.Failed}
	}
	b, err := json.Marshal(out)
	if err != nil { // strings and integers always marshal
		panic(err)
	}
	return string(b)
}

// DecodeBindings reads what EncodeBindings wrote; anything else is an
// error wrapping ErrCorrupt.
func DecodeBindings(s string) ([]BindingRow, error) {
	if s == "" {
		return nil, nil
	}
	var in []bindingJSON
	if err := json.Unmarshal([]byte(s), &in); err != nil {
		return nil, fmt.Errorf("%w: affinity bindings: %v", ErrCorrupt, err)
	}
	rows := make([]BindingRow, len(in))
	for i, b := range in {
		rows[i] = BindingRow{Context: b.Context, Key: b.Key, ResourceID: b.Resource, ExpiresAt: b.Expires, Failed: b.Failed}
	}
	return rows, nil
}

// bindingsProblem checks binding rows: valid context, key and resource id,
// and each (context, key) once.
func bindingsProblem(rows []BindingRow) error {
	type key struct{ c, k string }
	seen := make(map[key]bool, len(rows))
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
		if seen[key{b.Context, b.Key}] {
			return fmt.Errorf("%s: (%s, %s) repeats", what, quote(b.Context), quote(b.Key))
		}
		seen[key{b.Context, b.Key}] = true
	}
	return nil
}
