// Package yamlerr corrects the line numbers of gopkg.in/yaml.v3's syntax
// errors, so that a configuration file's error names the line an editor
// shows.
//
// yaml.v3 (v3.0.1, the last release) counts lines from 0 inside its parser
// and adds 1 only to scanner errors ("found character that cannot start
// any token"): a parser error ("did not find expected key") on line 3
// says "line 2", and one on line 1 says no line at all. Type errors
// ("cannot unmarshal") and scanner errors are right and pass through.
package yamlerr

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// parserProblems are the problems that yaml.v3's parser (parserc.go)
// reports; no scanner error says any of them.
var parserProblems = []string{
	"did not find expected <stream-start>",
	"did not find expected <document start>",
	"did not find expected node content",
	"did not find expected key",
	"did not find expected '-' indicator",
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
	"found undefined tag handle",
	"found duplicate %YAML directive",
	"found incompatible YAML document",
	"found duplicate %TAG directive",
}

var withLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// Fix returns err with the line of a yaml.v3 parser error corrected to
// count from 1, as the other errors do; any other error is returned as it
// is.
func Fix(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if m := withLine.FindStringSubmatch(msg); m != nil && slices.Contains(parserProblems, m[2]) {
		n, convErr := strconv.Atoi(m[1])
		if convErr != nil {
			return err
		}
		return fmt.Errorf("yaml: line %d: %s", n+1, m[2])
	}
	if problem, ok := strings.CutPrefix(msg, "yaml: "); ok && slices.Contains(parserProblems, problem) {
		return errors.New("yaml: line 1: " + problem)
	}
	return err
}
