package httpapi

import (
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// decodeFlat decodes the common request body straight into msg: one JSON
// object whose values are strings without escapes and whole numbers, each
// for a scalar field of msg, once, of a type the field takes — an acquire's,
// a release's, a report's, a renewal's. It reports false for anything else,
// with msg reset, and unmarshalBody's checked path then decides: a body
// decodeFlat takes is one that path takes too, into the same message
// (FuzzDecodeFlat), in one pass without its generic tree and its second
// parse.
func decodeFlat(raw []byte, msg proto.Message) bool {
	m := msg.ProtoReflect()
	d := flatDecoder{raw: raw, fields: m.Descriptor().Fields()}
	if !d.object(m) {
		proto.Reset(msg)
		return false
	}
	return true
}

type flatDecoder struct {
	raw    []byte
	i      int
	fields protoreflect.FieldDescriptors
	seen   uint64 // field numbers set, 1 to 63
}

func (d *flatDecoder) object(m protoreflect.Message) bool {
	if d.ws(); !d.eat('{') {
		return false
	}
	if d.ws(); d.eat('}') {
		return d.end()
	}
	for {
		key, ok := d.str()
		if !ok {
			return false
		}
		fd := d.fields.ByJSONName(string(key))
		if fd == nil {
			fd = d.fields.ByTextName(string(key))
		}
		if fd == nil || fd.Cardinality() == protoreflect.Repeated || fd.ContainingOneof() != nil ||
			fd.Number() > 63 || d.seen&(1<<fd.Number()) != 0 {
			return false // unknown, a list or a map, a oneof, or twice: the checked path says
		}
		d.seen |= 1 << fd.Number()
		if d.ws(); !d.eat(':') {
			return false
		}
		d.ws()
		if !d.value(m, fd) {
			return false
		}
		d.ws()
		if d.eat('}') {
			return d.end()
		}
		if !d.eat(',') {
			return false
		}
		d.ws()
	}
}

// value decodes one value into fd, if it is one fd takes as the checked
// path does.
func (d *flatDecoder) value(m protoreflect.Message, fd protoreflect.FieldDescriptor) bool {
	if d.i < len(d.raw) && d.raw[d.i] == '"' {
		s, ok := d.str()
		if !ok {
			return false
		}
		switch fd.Kind() {
		case protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString(string(s)))
			return true
		case protoreflect.EnumKind:
			v := fd.Enum().Values().ByName(protoreflect.Name(s))
			if v == nil {
				return false
			}
			m.Set(fd, protoreflect.ValueOfEnum(v.Number()))
			return true
		case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
			protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
			// 64-bit whole numbers are also taken as decimal strings, the
			// way the API writes them.
			return wholeNumber(s) && d.setInt(m, fd, string(s))
		}
		return false
	}
	start := d.i
	if d.i < len(d.raw) && d.raw[d.i] == '-' {
		d.i++
	}
	for d.i < len(d.raw) && d.raw[d.i] >= '0' && d.raw[d.i] <= '9' {
		d.i++
	}
	if !wholeNumber(d.raw[start:d.i]) {
		return false
	}
	if d.i < len(d.raw) {
		switch d.raw[d.i] {
		case ' ', '\t', '\n', '\r', ',', '}':
		default:
			return false // a fraction, an exponent, or not a number
		}
	}
	return d.setInt(m, fd, string(d.raw[start:d.i]))
}

// wholeNumber reports whether s is a JSON integer: an optional minus, then
// 0 or digits that do not start with 0.
func wholeNumber(s []byte) bool {
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	if len(s) == 0 || len(s) > 1 && s[0] == '0' {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// setInt sets the whole number s into an integer field in its range.
func (d *flatDecoder) setInt(m protoreflect.Message, fd protoreflect.FieldDescriptor, s string) bool {
	if _, refused := zeroRefused[fd.FullName()]; refused {
		return false
	}
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return false
		}
		m.Set(fd, protoreflect.ValueOfInt32(int32(n)))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return false
		}
		m.Set(fd, protoreflect.ValueOfUint32(uint32(n)))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return false
		}
		m.Set(fd, protoreflect.ValueOfInt64(n))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return false
		}
		m.Set(fd, protoreflect.ValueOfUint64(n))
	default:
		return false
	}
	return true
}

// str reads a JSON string without escapes, valid UTF-8 without control
// characters, and returns its bytes.
func (d *flatDecoder) str() ([]byte, bool) {
	if !d.eat('"') {
		return nil, false
	}
	start := d.i
	for d.i < len(d.raw) {
		switch c := d.raw[d.i]; {
		case c == '"':
			s := d.raw[start:d.i]
			d.i++
			return s, utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		}
		d.i++
	}
	return nil, false
}

func (d *flatDecoder) eat(c byte) bool {
	if d.i < len(d.raw) && d.raw[d.i] == c {
		d.i++
		return true
	}
	return false
}

// ws skips JSON whitespace.
func (d *flatDecoder) ws() {
	for d.i < len(d.raw) {
		switch d.raw[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// end reports whether only whitespace is left.
func (d *flatDecoder) end() bool {
	d.ws()
	return d.i == len(d.raw)
}
