package inventory

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/repool/repool/internal/testenv"
)

// FuzzParse feeds arbitrary documents to Parse. A refused document yields
// no inventory and an error wrapping ErrInvalid that never quotes the VRRP
// password; an accepted one validates, and written back as YAML it parses
// again to the same inventory (parse, render, parse). No input takes
// longer than testenv.FuzzBound.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile(examplePath)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	f.Add([]byte(minimal))
	for _, doc := range []string{"", minimal + "extra: 1\n", minimal + "checks: {inter: fast}\n",
		strings.Replace(minimal, "router_id: 7", "router_id: 0", 1), "vip: [", "a: &a [*a, *a]\n", "--- 1\n--- 2\n"} {
		f.Add([]byte(doc))
	}
	for _, tt := range validateCases() {
		inv, err := Parse(strings.NewReader(minimal))
		if err != nil {
			f.Fatalf("Parse(minimal) = %v", err)
		}
		tt.change(inv)
		raw, err := yaml.Marshal(inv)
		if err != nil {
			f.Fatalf("yaml.Marshal(%s) = %v", tt.name, err)
		}
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		var inv *Inventory
		var err error
		testenv.Timed(t, "Parse", func() { inv, err = Parse(bytes.NewReader(doc)) })
		if err != nil {
			switch {
			case inv != nil:
				t.Fatalf("Parse() = %+v with error %v, want no inventory", inv, err)
			case !errors.Is(err, ErrInvalid):
				t.Fatalf("Parse() = %v, want an error wrapping ErrInvalid", err)
			}
			if pass := authPass(doc); len(pass) >= 4 && bytes.Count(doc, []byte(pass)) == 1 && strings.Contains(err.Error(), pass) {
				t.Fatalf("Parse() = %v, which quotes vip.auth_pass %q", err, pass)
			}
			return
		}
		if err := inv.Validate(); err != nil {
			t.Fatalf("Validate(Parse(doc)) = %v, want nil", err)
		}
		raw, err := yaml.Marshal(inv)
		if err != nil {
			t.Fatalf("yaml.Marshal(parsed inventory) = %v", err)
		}
		again, err := Parse(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("Parse(Marshal(Parse(doc))) = %v, want the inventory again; rendered:\n%s", err, raw)
		}
		if !reflect.DeepEqual(again, inv) {
			t.Fatalf("Parse(Marshal(Parse(doc))) = %+v, want %+v; rendered:\n%s", again, inv, raw)
		}
	})
}

// authPass returns vip.auth_pass of doc if it is a string, else "".
func authPass(doc []byte) string {
	var m struct {
		VIP struct {
			AuthPass string `yaml:"auth_pass"`
		} `yaml:"vip"`
	}
	if yaml.Unmarshal(doc, &m) != nil {
		return ""
	}
	return m.VIP.AuthPass
}
