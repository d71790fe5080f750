package yamlerr

import (
	"errors"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestFix decodes documents with a mistake on a known line and checks the
// corrected error names that line.
func TestFix(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"sequence item in a mapping, line 2", "a: 1\n- b\n", "yaml: line 2: did not find expected key"},
		{"sequence item in a mapping, line 3", "a: 1\nb: 2\n- c\n", "yaml: line 3: did not find expected key"},
		{"unclosed flow mapping opened on line 2", "a: 1\nb: {x\n", "yaml: line 2: did not find expected ',' or '}'"},
		{"unclosed flow sequence opened on line 3", "a: 1\nb: 2\nc: [1, 2\nd: 3\n", "yaml: line 3: did not find expected ',' or ']'"},
		{"mapping after a sequence, line 1", "- a\nb: 1\n", "yaml: line 2: did not find expected '-' indicator"},
		{"problem on line 1", "]\n", "yaml: line 1: did not find expected node content"},
		// Scanner errors count from 1 already.
		{"tab indentation, line 2", "a: 1\n\tb: 2\n", "yaml: line 2: found a tab character that violates indentation"},
		{"missing colon, line 2", "a: 1\nb\n", "yaml: line 2: could not find expected ':'"},
		{"bad token, line 3", "a: 1\nb: 2\nc: @x\n", "yaml: line 3: found character that cannot start any token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v any
			err := yaml.Unmarshal([]byte(tt.doc), &v)
			if err == nil {
				t.Fatalf("yaml.Unmarshal(%q) = got nil error, want one", tt.doc)
			}
			if got := Fix(err); got == nil || got.Error() != tt.want {
				t.Errorf("Fix(yaml.Unmarshal(%q) = %q) = got %v, want %q", tt.doc, err, got, tt.want)
			}
		})
	}
}

func TestFixLeavesOtherErrors(t *testing.T) {
	var v struct{ A int }
	typeErr := yaml.Unmarshal([]byte("a: 1\na: x\n"), &v)
	other := errors.New("config file: no such file")
	for _, err := range []error{nil, typeErr, other} {
		if got := Fix(err); got != err {
			t.Errorf("Fix(%v) = got %v, want the error unchanged", err, got)
		}
	}
}
