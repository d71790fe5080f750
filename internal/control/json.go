package control

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
)

// MaxBodyBytes bounds a request body; a larger one is refused with 400.
const MaxBodyBytes = 64 << 10

// decodeBody decodes the request's JSON body into v: exactly one JSON value
// of at most MaxBodyBytes, without unknown fields. Every problem is a 400
// whose message describes the body in our words (encoding/json's messages
// name Go types).
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bodyError(err)
	}
	switch _, err := dec.Token(); {
	case errors.Is(err, io.EOF):
		return nil
	case err == nil:
		return invalidArgument("request body has data after the JSON value")
	default:
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return bodyError(err)
		}
		return invalidArgument("request body has data after the JSON value")
	}
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
