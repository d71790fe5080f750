package yamlerr

import (
	"errors"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
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

// TestFixWordsTypeErrors: yaml.v3's type errors come back in our words,
// naming the key as the file writes it; others are kept as they are.
func TestFixWordsTypeErrors(t *testing.T) {
	type provider struct {
		Endpoint string `yaml:"endpoint"`
		Port     int    `yaml:"port"`
	}
	for _, tt := range []struct{ doc, want string }{
		{"endpoint: a\napikey: k\n", `yaml: line 2: unknown key "apikey" (keys are case-sensitive; see the documented keys of this section)`},
		{"port: abc\n", `yaml: line 1: "abc" is a string; want a whole number`},
		{"endpoint: a\nendpoint: b\n", `yaml: line 2: mapping key "endpoint" already defined at line 1`},
	} {
		var v provider
		dec := yaml.NewDecoder(strings.NewReader(tt.doc))
		dec.KnownFields(true)
		if got := Fix(dec.Decode(&v)); got == nil || got.Error() != tt.want {
			t.Errorf("Fix(decoding %q) = %v, want %q", tt.doc, got, tt.want)
		}
	}
}

// TestLibraryMisnumbers pins the library behaviour Fix corrects: its parser
// names the line before the one at fault, and none for line 1. When a
// release of go.yaml.in/yaml/v3 numbers them right, this fails, and Fix's
// line correction (which would then add one too many) must go.
func TestLibraryMisnumbers(t *testing.T) {
	for _, tt := range []struct{ doc, want string }{
		{"a: 1\nb: 2\n- c\n", "yaml: line 2: did not find expected key"},
		{"]\n", "yaml: did not find expected node content"},
	} {
		var v any
		if err := yaml.Unmarshal([]byte(tt.doc), &v); err == nil || err.Error() != tt.want {
			t.Errorf("yaml.Unmarshal(%q) = got %v, want the library's own %q", tt.doc, err, tt.want)
		}
	}
}

func TestFixLeavesOtherErrors(t *testing.T) {
	other := errors.New("config file: no such file")
	for _, err := range []error{nil, other} {
		if got := Fix(err); got != err {
			t.Errorf("Fix(%v) = got %v, want the error unchanged", err, got)
		}
	}
}
