// Package quickstart runs README.md's quick start as a newcomer would: its
// test starts ./scripts/run on free ports with a temporary data directory
// and runs every `console` block of the README, in order, in one shell,
// comparing each command's answer with the transcript. This file reads the
// transcripts and compares the answers; quickstart_test.go runs them.
package quickstart

import (
	"bufio"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"
)

// Step is one command of a transcript: the command (its continuation lines
// joined as the shell reads them) and the lines it answers.
type Step struct {
	// Line is the README line of the command, for messages.
	Line int
	// Command is the shell text after "$ ".
	Command string
	// Want are the lines of the answer, blank lines left out. "…" in a line
	// stands for any text.
	Want []string
}

// Transcripts returns the steps of every ```console block of the markdown
// text, in order. A "$ " line is a command; a command line that ends in
// "\" goes on on the next line; the other lines are its answer.
func Transcripts(markdown string) ([]Step, error) {
	var steps []Step
	in, cont := false, false
	sc := bufio.NewScanner(strings.NewReader(markdown))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case !in && strings.HasPrefix(line, "```console"):
			in = true
			continue
		case !in:
			continue
		case strings.HasPrefix(line, "```"):
			if cont {
				return nil, fmt.Errorf("line %d: the block ends inside a command", n)
			}
			in = false
			continue
		}
		switch {
		case cont:
			steps[len(steps)-1].Command += "\n" + line
		case strings.HasPrefix(line, "$ "):
			steps = append(steps, Step{Line: n, Command: strings.TrimPrefix(line, "$ ")})
		case strings.TrimSpace(line) == "":
		case len(steps) == 0:
			return nil, fmt.Errorf("line %d: an answer before the first command", n)
		default:
			steps[len(steps)-1].Want = append(steps[len(steps)-1].Want, line)
		}
		cont = (cont || strings.HasPrefix(line, "$ ")) && strings.HasSuffix(line, "\\")
	}
	if in {
		return nil, fmt.Errorf("a console block is not closed")
	}
	return steps, sc.Err()
}

// Wildcard stands for any text in a transcript's answer.
const Wildcard = "…"

// Match reports whether an answer's line got matches the transcript's line
// want. When want is JSON the two are compared as JSON values (protojson
// puts spaces in different places from build to build), a string with
// Wildcard in want matching any string of that shape; otherwise as text,
// Wildcard matching any text and a space allowed after every comma and
// colon.
func Match(want, got string) bool {
	var w, g any
	if json.Unmarshal([]byte(want), &w) == nil {
		return json.Unmarshal([]byte(got), &g) == nil && matchJSON(w, g)
	}
	return textPattern(want).MatchString(strings.TrimRight(got, " "))
}

func matchJSON(want, got any) bool {
	switch w := want.(type) {
	case string:
		g, ok := got.(string)
		return ok && textPattern(w).MatchString(g)
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for k, v := range w {
			gv, ok := g[k]
			if !ok || !matchJSON(v, gv) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !matchJSON(w[i], g[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(want, got)
}

var afterPunct = regexp.MustCompile(`([,:])`)

// textPattern is want as an anchored regular expression.
func textPattern(want string) *regexp.Regexp {
	parts := strings.Split(want, Wildcard)
	for i, p := range parts {
		parts[i] = afterPunct.ReplaceAllString(regexp.QuoteMeta(p), `$1\s*`)
	}
	return regexp.MustCompile(`^` + strings.Join(parts, `.*`) + `$`)
}
