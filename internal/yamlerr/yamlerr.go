// Package yamlerr corrects the line numbers of go.yaml.in/yaml/v3's syntax
// errors, so that a configuration file's error names the line an editor
// shows, and words its type errors in a configuration file's terms.
//
// yaml/v3 (v3.0.6, like gopkg.in/yaml.v3 v3.0.1 before it; TestLibraryMisnumbers
// fails when a release corrects this) counts lines from 0 inside its parser
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

	"go.yaml.in/yaml/v3"
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
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return typeErrors(te)
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

var (
	unknownField = regexp.MustCompile(`^line (\d+): field (.+) not found in type \S+$`)
	cannotDecode = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+) `(.*)` into (\\S+)$")
)

// typeErrors rewrites yaml.v3's type errors in our words: an unknown key is
// named as the file writes it (yaml.v3 says "field apikey not found in type
// config.Provider"), and a value of the wrong kind says what was expected
// instead of naming a Go type.
func typeErrors(te *yaml.TypeError) error {
	var msgs []string
	for _, e := range te.Errors {
		if m := unknownField.FindStringSubmatch(e); m != nil {
			msgs = append(msgs, fmt.Sprintf("line %s: unknown key %q (keys are case-sensitive; see the documented keys of this section)", m[1], m[2]))
			continue
		}
		if m := cannotDecode.FindStringSubmatch(e); m != nil {
			msgs = append(msgs, fmt.Sprintf("line %s: %q is a %s; want %s", m[1], m[3], yamlKind(m[2]), goKind(m[4])))
			continue
		}
		msgs = append(msgs, e)
	}
	return errors.New("yaml: " + strings.Join(msgs, "; "))
}

func yamlKind(tag string) string {
	switch tag {
	case "str":
		return "string"
	case "int", "float":
		return "number"
	case "bool":
		return "boolean"
	case "map":
		return "mapping"
	case "seq":
		return "list"
	}
	return tag
}

// goKind says what a Go type takes, in a configuration file's terms.
func goKind(t string) string {
	switch {
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "a whole number"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "bool":
		return "true or false"
	case t == "string":
		return "a string"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["):
		return "a mapping"
	case t == "time.Duration":
		return "a duration such as 500ms or 2s"
	}
	return "a mapping (a section of keys)"
}
