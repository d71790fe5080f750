package topology

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSeeLogQuotesTheLastLines(t *testing.T) {
	dir := t.TempDir()
	var long strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&long, "line %d\n", i)
	}
	write := func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name      string
		path      string
		want      []string
		wantNot   []string
		wantLines int // quoted lines, each after "\n\t"
	}{
		{"long log", write("long.log", long.String()), []string{"line 26\n", "line 40"}, []string{"line 25\n"}, logTailLines},
		{"short log", write("short.log", "listening\nfatal: no store\n"), []string{"listening", "fatal: no store"}, nil, 2},
		{"empty log", write("empty.log", ""), []string{"(empty)"}, nil, 0},
		{"missing log", filepath.Join(dir, "none.log"), []string{"unreadable"}, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := seeLog(tt.path)
			if !strings.HasPrefix(got, "see "+tt.path) {
				t.Errorf("seeLog(%s) = %q, want it to start with the path", tt.name, got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("seeLog(%s) = %q, want it to contain %q", tt.name, got, w)
				}
			}
			for _, w := range tt.wantNot {
				if strings.Contains(got, w) {
					t.Errorf("seeLog(%s) = %q, want it without %q", tt.name, got, w)
				}
			}
			if n := strings.Count(got, "\n\t"); n != tt.wantLines {
				t.Errorf("seeLog(%s) quotes %d lines, want %d", tt.name, n, tt.wantLines)
			}
		})
	}
}
