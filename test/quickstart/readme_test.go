package quickstart

import (
	"reflect"
	"testing"
)

func TestTranscripts(t *testing.T) {
	md := "intro\n```sh\n$ not run\n```\n```console\n$ A=1\n$ echo $A \\\n   two\n1 two\n\n$ true\n```\ntext\n```console\n$ echo x\nx\n```\n"
	got, err := Transcripts(md)
	want := []Step{
		{Line: 6, Command: "A=1"},
		{Line: 7, Command: "echo $A \\\n   two", Want: []string{"1 two"}},
		{Line: 11, Command: "true"},
		{Line: 15, Command: "echo x", Want: []string{"x"}},
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Transcripts(%q) = got %+v, %v, want %+v", md, got, err, want)
	}
	for _, bad := range []string{"```console\nanswer first\n```\n", "```console\n$ x\n", "```console\n$ a \\\n```\n"} {
		if _, err := Transcripts(bad); err == nil {
			t.Errorf("Transcripts(%q) = got nil error, want one", bad)
		}
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		name      string
		want, got string
		match     bool
	}{
		{"same JSON", `{"a":1,"b":"x"}`, `{"a":1,"b":"x"}`, true},
		{"protojson spacing", `{"a":"1", "b":"x"}`, `{"a":"1","b":"x"}`, true},
		{"wildcard in a string", `{"id":"proxy-…","at":"…"}`, `{"id":"proxy-2", "at":"2026-12-01T20:46:31Z"}`, true},
		{"wildcard keeps the rest", `{"id":"proxy-…"}`, `{"id":"host-2"}`, false},
		{"other value", `{"a":1}`, `{"a":2}`, false},
		{"missing key", `{"a":1,"b":2}`, `{"a":1}`, false},
		{"extra key", `{"a":1}`, `{"a":1,"b":2}`, false},
		{"not JSON answer to JSON", `{}`, `curl: (7) Failed to connect`, false},
		{"text", `role operator, expires …`, `role operator, expires 2026-12-01T21:46:01Z`, true},
		{"text differs", `role operator, expires …`, `role tenant-admin, expires 2026-12-01T21:46:01Z`, false},
		{"wildcard outside strings", `{"id":…,"at":"…"}`, `{"id":6,"at":"2026"}`, true},
		{"regexp characters are literal", `a.b (c)`, `aXb (c)`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Match(tt.want, tt.got); got != tt.match {
				t.Errorf("Match(%q, %q) = got %v, want %v", tt.want, tt.got, got, tt.match)
			}
		})
	}
}
