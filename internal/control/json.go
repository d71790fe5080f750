package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
)

// MaxBodyBytes bounds a request body; a larger one is refused with 400.
const MaxBodyBytes = 64 << 10

// decodeBody decodes the request's JSON body into v: exactly one JSON value
// of at most MaxBodyBytes. Field names must match the request's fields
// exactly: encoding/json matches them without regard to letter case, so a
// strict pass over the keys (checkKeys) first refuses unknown names in any
// letter case and duplicate names, then encoding/json decodes. Every
// problem is a 400 whose message describes the body in our words
// (encoding/json's messages name Go types).
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		return bodyError(err)
	}
	if err := checkKeys(raw, reflect.TypeOf(v).Elem()); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bodyError(err)
	}
	return nil
}

// checkKeys walks the JSON in raw against the Go type t that it will be
// decoded into, and refuses what encoding/json would let through: an
// object key that is no field's exact JSON name (encoding/json would take
// "ID" for "id"), a key given twice (encoding/json keeps the last), and
// data after the first JSON value. Syntax and type errors are left to the
// decoder, which names them better, except where the walk cannot go on.
func checkKeys(raw []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := walkValue(dec, t, ""); err != nil {
		return err
	}
	switch _, err := dec.Token(); {
	case errors.Is(err, io.EOF):
		return nil
	case err == nil:
		return invalidArgument("request body has data after the JSON value")
	default:
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return invalidArgument("request body has data after the JSON value")
		}
		return bodyError(err)
	}
}

// unmarshalerType is json.Unmarshaler: a type that decodes itself is a leaf
// of the walk.
var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// walkValue reads one JSON value from dec, checking the keys of every
// object in it against t (nil: anything goes). path names the value in
// messages ("" for the body itself).
func walkValue(dec *json.Decoder, t reflect.Type, path string) error {
	tok, err := dec.Token()
	if err != nil {
		if path != "" {
			return inside(err)
		}
		return bodyError(err)
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && reflect.PointerTo(t).Implements(unmarshalerType) {
		t = nil
	}
	switch tok {
	case json.Delim('{'):
		return walkObject(dec, t, path)
	case json.Delim('['):
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := walkValue(dec, elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil {
			return inside(err)
		}
	}
	return nil
}

// walkObject reads the rest of an object whose '{' dec has just returned.
// For a struct t every key must be one of its fields' JSON names, exactly;
// for any t no key may repeat.
func walkObject(dec *json.Decoder, t reflect.Type, path string) error {
	var fields map[string]reflect.Type
	if t != nil && t.Kind() == reflect.Struct {
		fields = jsonFields(t)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return inside(err)
		}
		key, _ := tok.(string) // object keys are strings
		name := key
		if path != "" {
			name = path + "." + key
		}
		if seen[key] {
			return invalidArgument("duplicate field %s", shortQuote(name))
		}
		seen[key] = true
		var ft reflect.Type
		if fields != nil {
			var ok bool
			if ft, ok = fields[key]; !ok {
				return unknownField(name, key, path, fields)
			}
		} else if t != nil && t.Kind() == reflect.Map {
			ft = t.Elem()
		}
		if err := walkValue(dec, ft, name); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return inside(err)
	}
	return nil
}

// inside describes an error of reading inside a JSON value, where the end
// of the body means that the value is cut short.
func inside(err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return bodyError(err)
}

// unknownField refuses key, naming the field it differs from only in
// letter case, if there is one.
func unknownField(name, key, path string, fields map[string]reflect.Type) error {
	for f := range fields {
		if strings.EqualFold(f, key) {
			if path != "" {
				f = path + "." + f
			}
			return invalidArgument("unknown field %s (field names are case-sensitive: did you mean %q?)", shortQuote(name), f)
		}
	}
	return invalidArgument("unknown field %s", shortQuote(name))
}

// jsonFields maps the JSON names of t's exported fields to their types.
// The request types are flat structs with explicit names; embedded structs
// are not looked into.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	m := make(map[string]reflect.Type, t.NumField())
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		m[name] = f.Type
	}
	return m
}

// bodyError describes a decoding error of a request body.
func bodyError(err error) error {
	var (
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
		tooBig *http.MaxBytesError
	)
	switch {
	case errors.Is(err, io.EOF):
		return invalidArgument("request body is empty; want a JSON object")
	case errors.As(err, &tooBig):
		return invalidArgument("request body is larger than %d bytes", MaxBodyBytes)
	case errors.As(err, &syntax):
		return invalidArgument("request body is not valid JSON (at byte %d)", syntax.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalidArgument("request body is truncated JSON")
	case errors.As(err, &typ):
		if typ.Field == "" {
			return invalidArgument("request body is a JSON %s; want a JSON object", typ.Value)
		}
		return invalidArgument("field %q: got JSON %s, want %s", typ.Field, typ.Value, jsonKind(typ.Type))
	}
	// encoding/json has no type for unknown fields: `json: unknown field "x"`.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return invalidArgument("unknown field %s", name)
	}
	return invalidArgument("request body is not valid JSON")
}

// writeJSON writes v as the JSON response with status. Responses may carry
// a freshly issued API key, so none is cached.
func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	// An encoding error here means the client went away; there is nobody
	// left to tell.
	// HTML escaping would turn "->" into "-\u003e"; application/json with
	// nosniff is never rendered as HTML.
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// jsonKind names what JSON a Go type takes, for error messages.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer in range"
	case reflect.Float32, reflect.Float64:
		return "a number in range"
	case reflect.Bool:
		return "true or false"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "another type"
}
