package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// unmarshalBody decodes a JSON request body into msg. Every refusal is in
// our words: the field by its JSON path as the caller wrote it, what it
// holds and what is allowed; protojson's own text never reaches the caller.
// The body is checked against msg's fields first (object shape, unknown
// fields, value types), then decoded by protojson. The common flat body
// (decodeFlat) is decoded in one pass instead.
func unmarshalBody(raw []byte, msg proto.Message) error {
	if decodeFlat(raw, msg) {
		return nil
	}
	return unmarshalChecked(raw, msg)
}

// unmarshalChecked is unmarshalBody's checked path.
func unmarshalChecked(raw []byte, msg proto.Message) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return badRequest("request body is not valid JSON (at byte %d)", se.Offset)
		}
		return badRequest("request body is not valid JSON: it ends too early")
	}
	if dec.More() {
		return badRequest("request body holds more than one JSON value; want one object")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return badRequest("request body is %s; want a JSON object", jsonKind(v))
	}
	if err := checkMessage("", obj, msg.ProtoReflect().Descriptor()); err != nil {
		return err
	}
	if err := protojson.Unmarshal(raw, msg); err != nil {
		// checkMessage refuses what protojson would, so this is a value
		// out of its type's range (an int32 above 2^31, say).
		return badRequest("request body has a value that does not fit its field (a number out of range, or a string that is not valid UTF-8)")
	}
	return nil
}

// checkMessage checks obj against the fields of md; path is where obj is.
func checkMessage(path string, obj map[string]any, md protoreflect.MessageDescriptor) error {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fd := md.Fields().ByJSONName(k)
		if fd == nil {
			fd = md.Fields().ByTextName(k)
		}
		at := joinPath(path, k)
		if fd == nil {
			return badRequest("unknown field %s in the request body; allowed here: %s", jsonQuote(at), fieldList(md))
		}
		if err := checkField(at, obj[k], fd); err != nil {
			return err
		}
	}
	return nil
}

func joinPath(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// fieldList names md's fields as the API writes them.
func fieldList(md protoreflect.MessageDescriptor) string {
	var names []string
	for i := 0; i < md.Fields().Len(); i++ {
		names = append(names, string(md.Fields().Get(i).Name()))
	}
	return strings.Join(names, ", ")
}

// zeroRefused are the integer fields whose 0 in gRPC means "the default"
// (proto3 cannot tell 0 from absent), so that a JSON body that writes 0 is
// refused with what to write instead rather than taken as the default.
var zeroRefused = map[protoreflect.FullName]string{
	"repool.v1.Resource.capacity": "want 1 to 1048576 leases at once (leave it out for 1)",
}

func checkField(at string, v any, fd protoreflect.FieldDescriptor) error {
	if v == nil {
		return nil // null: the field's default
	}
	switch {
	case fd.IsMap():
		obj, ok := v.(map[string]any)
		if !ok {
			return wrongType(at, v, "an object of "+kindName(fd.MapValue()))
		}
		for k, e := range obj {
			if err := checkValue(at+"."+k, e, fd.MapValue()); err != nil {
				return err
			}
		}
		return nil
	case fd.IsList():
		arr, ok := v.([]any)
		if !ok {
			return wrongType(at, v, "an array of "+kindName(fd))
		}
		for i, e := range arr {
			if err := checkValue(at+"["+strconv.Itoa(i)+"]", e, fd); err != nil {
				return err
			}
		}
		return nil
	}
	return checkValue(at, v, fd)
}

// checkValue checks one value of fd's kind.
func checkValue(at string, v any, fd protoreflect.FieldDescriptor) error {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if _, ok := v.(string); !ok {
			return wrongType(at, v, "a string")
		}
	case protoreflect.BoolKind:
		if _, ok := v.(bool); !ok {
			return wrongType(at, v, "true or false")
		}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		if hint, ok := zeroRefused[fd.FullName()]; ok {
			if n, isNum := v.(json.Number); isNum {
				if z, err := strconv.ParseInt(n.String(), 10, 64); err == nil && z == 0 {
					return badRequest("%s is 0; %s", at, hint)
				}
			}
		}
		return checkInt(at, v, math.MinInt32, math.MaxInt32, false)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return checkInt(at, v, 0, math.MaxUint32, false)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return checkInt(at, v, math.MinInt64, math.MaxInt64, true)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return checkUint64(at, v)
	case protoreflect.EnumKind:
		values := fd.Enum().Values()
		switch x := v.(type) {
		case string:
			if values.ByName(protoreflect.Name(x)) == nil {
				return badRequest("%s is %s; allowed: %s", at, jsonQuote(x), enumList(fd.Enum()))
			}
		case json.Number:
			n, err := x.Int64()
			if err != nil || values.ByNumber(protoreflect.EnumNumber(n)) == nil {
				return badRequest("%s is %s; allowed: %s", at, x, enumList(fd.Enum()))
			}
		default:
			return wrongType(at, v, "one of "+enumList(fd.Enum()))
		}
	case protoreflect.MessageKind:
		if fd.Message().FullName() == "google.protobuf.Timestamp" {
			if _, ok := v.(string); !ok {
				return wrongType(at, v, "an RFC 3339 time string")
			}
			return nil
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return wrongType(at, v, "an object")
		}
		return checkMessage(at, obj, fd.Message())
	}
	return nil
}

func enumList(ed protoreflect.EnumDescriptor) string {
	var names []string
	for i := 0; i < ed.Values().Len(); i++ {
		names = append(names, string(ed.Values().Get(i).Name()))
	}
	return strings.Join(names, ", ")
}

// checkInt checks a whole number in [lo, hi], as a JSON number or, if
// asString, also as a decimal string (64-bit integers are strings in the
// API's answers).
func checkInt(at string, v any, lo, hi int64, asString bool) error {
	var s string
	switch x := v.(type) {
	case json.Number:
		s = x.String()
	case string:
		if !asString {
			return wrongType(at, v, "a whole number")
		}
		s = x
	default:
		return wrongType(at, v, "a whole number")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < lo || n > hi {
		return badRequest("%s is %s; want a whole number from %d to %d", at, s, lo, hi)
	}
	return nil
}

func checkUint64(at string, v any) error {
	var s string
	switch x := v.(type) {
	case json.Number:
		s = x.String()
	case string:
		s = x
	default:
		return wrongType(at, v, "a whole number (as a number or a decimal string)")
	}
	if _, err := strconv.ParseUint(s, 10, 64); err != nil {
		return badRequest("%s is %s; want a whole number from 0 to 18446744073709551615 (as a number or a decimal string)", at, jsonQuote(s))
	}
	return nil
}

func wrongType(at string, v any, want string) error {
	return badRequest("%s is %s; want %s", at, jsonKind(v), want)
}

// jsonKind names the kind of a decoded JSON value.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func kindName(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return "strings"
	case protoreflect.MessageKind:
		return "objects"
	}
	return "values"
}
