package tenantmap

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/repool/repool/internal/lb/haproxy"
	"github.com/repool/repool/internal/testenv"
)

func TestRender(t *testing.T) {
	got, err := Render(map[string]string{"zeta": "big", "acme": "default", "b-2": "big", "c_3": "noisy-1"})
	if err != nil {
		t.Fatalf("Render() = got error %v, want nil", err)
	}
	want := Header + "b-2 repool_big\nc_3 repool_noisy-1\nzeta repool_big\n"
	if string(got) != want {
		t.Errorf("Render() = got\n%s\nwant\n%s", got, want)
	}
	if got, err := Render(nil); err != nil || string(got) != Header {
		t.Errorf("Render(nil) = got %q, %v, want the header alone", got, err)
	}
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		name       string
		placements map[string]string
		text       string
	}{
		{"tenant id upper", map[string]string{"Acme": "big"}, `"Acme"`},
		{"tenant id with space", map[string]string{"a b": "big"}, `"a b"`},
		{"tenant id empty", map[string]string{"": "big"}, `""`},
		{"tenant id too long", map[string]string{strings.Repeat("a", 65): "big"}, "not valid"},
		{"group empty", map[string]string{"acme": ""}, `""`},
		{"group with underscore", map[string]string{"acme": "a_b"}, `"a_b"`},
		{"group with newline", map[string]string{"acme": "a\nb"}, "group"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Render(tt.placements)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.text) || got != nil {
				t.Errorf("Render(%q) = got %q, %v, want no file and an error wrapping ErrInvalid mentioning %s", tt.placements, got, err, tt.text)
			}
		})
	}
}

func TestParse(t *testing.T) {
	got, err := Parse([]byte("# comment\n\n  t1   repool_a  \r\nt2\trepool_b-2\n"))
	if err != nil {
		t.Fatalf("Parse() = got error %v, want nil", err)
	}
	if want := map[string]string{"t1": "a", "t2": "b-2"}; !maps.Equal(got, want) {
		t.Errorf("Parse() = got %v, want %v", got, want)
	}
	for _, tt := range []struct{ name, file, text string }{
		{"one field", "t1\n", "line 1"},
		{"three fields", "# x\nt1 repool_a x\n", "line 2"},
		{"bad tenant", "T1 repool_a\n", `"T1"`},
		{"default backend", "t1 repool\n", `"repool"`},
		{"other backend", "t1 web\n", `"web"`},
		{"bad group", "t1 repool_A\n", `"repool_A"`},
		{"twice", "t1 repool_a\nt1 repool_b\n", "twice"},
		{"line too long", "t1 repool_" + strings.Repeat("a", MaxLine), "too long"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.file))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.text) || got != nil {
				t.Errorf("Parse(%q) = got %v, %v, want an error wrapping ErrInvalid mentioning %s", tt.file, got, err, tt.text)
			}
		})
	}
}

func TestDiff(t *testing.T) {
	have := []haproxy.MapEntry{
		{Key: "keep", Value: "repool_a"},
		{Key: "change", Value: "repool_a"},
		{Key: "gone", Value: "repool_b"},
		{Key: "dup", Value: "repool_a"},
		{Key: "dup", Value: "repool_b"},
		{Key: "dupgone", Value: "repool_a"},
		{Key: "dupgone", Value: "repool_a"},
	}
	want := map[string]string{"keep": "repool_a", "change": "repool_b", "dup": "repool_b", "new2": "repool_a", "new1": "repool_b"}
	d := Diff(have, want)
	if got, w := d.Del, []string{"dup", "dupgone", "gone"}; !slices.Equal(got, w) {
		t.Errorf("Diff().Del = got %q, want %q", got, w)
	}
	if got, w := d.Set, []haproxy.MapEntry{{Key: "change", Value: "repool_b"}}; !slices.Equal(got, w) {
		t.Errorf("Diff().Set = got %v, want %v", got, w)
	}
	if got, w := d.Add, []haproxy.MapEntry{{Key: "dup", Value: "repool_b"}, {Key: "new1", Value: "repool_b"}, {Key: "new2", Value: "repool_a"}}; !slices.Equal(got, w) {
		t.Errorf("Diff().Add = got %v, want %v", got, w)
	}
	if d := Diff([]haproxy.MapEntry{{Key: "a", Value: "repool_x"}}, map[string]string{"a": "repool_x"}); !d.Empty() {
		t.Errorf("Diff(equal) = got %v, want empty", d)
	}
}

// FuzzParse feeds arbitrary files to Parse. A refused file yields no
// placements and an error wrapping ErrInvalid; an accepted one renders
// (Render) to a file that parses to the same placements, and rendering
// that again gives the same bytes. No input takes longer than
// testenv.FuzzBound.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"", Header, "t1 repool_a\n", "# c\n\nt1\trepool_big\r\nt2 repool_a-1\n", "t1 repool\n", "t1 repool_a x\n",
		"t1 repool_a\nt1 repool_a\n", "T1 repool_a\n", "t1 repool_A\n", "\x00 repool_a\n", "t1 repool_" + strings.Repeat("a", 40) + "\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		testenv.Timed(t, "Parse and Render", func() {
			pl, err := Parse(data)
			if err != nil {
				if !errors.Is(err, ErrInvalid) || pl != nil {
					t.Fatalf("Parse(%q) = got %v, %v, want nil and an error wrapping ErrInvalid", data, pl, err)
				}
				return
			}
			out, err := Render(pl)
			if err != nil {
				t.Fatalf("Render(Parse(%q)) = got error %v, want nil", data, err)
			}
			again, err := Parse(out)
			if err != nil || !maps.Equal(again, pl) {
				t.Fatalf("Parse(Render(Parse(%q))) = got %v, %v, want %v", data, again, err, pl)
			}
			if out2, _ := Render(again); string(out2) != string(out) {
				t.Fatalf("Render is not stable: %q then %q", out, out2)
			}
		})
	})
}
