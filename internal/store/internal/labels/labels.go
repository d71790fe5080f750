// Package labels is the one text encoding of resource labels that both
// store implementations persist: a JSON object of strings.
package labels

import (
	"encoding/json"
	"fmt"
)

// Encode returns m as a JSON object; nil and empty maps encode as "{}".
// Keys are sorted, so equal maps encode equally.
func Encode(m map[string]string) string {
	if len(m) == 0 {
		return "{}"
	}
	b, err := json.Marshal(m)
	if err != nil {
		// A map[string]string always marshals.
		panic(fmt.Sprintf("labels: marshal: %v", err))
	}
	return string(b)
}

// Decode parses what Encode produced. An empty object decodes as nil. Text
// that is not a JSON object of strings returns an error.
func Decode(s string) (map[string]string, error) {
	if s == "{}" {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("labels: %w", err)
	}
	if m == nil {
		return nil, fmt.Errorf("labels: %q is not a JSON object", s)
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}
