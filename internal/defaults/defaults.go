// Package defaults fills the zero fields of a configuration struct from
// another value of it, so that a package keeps its defaults as data (a
// value of its configuration type) instead of a chain of "if zero, set":
// the pool's, the server's, the load balancers' inventory, the sidecar's
// policies, and a named policy under a provider's own keys.
package defaults

import "reflect"

// Fill returns v with every zero field set to that field of d, field by
// field through nested structs: a field v sets (not zero) stays v's. T must
// be a struct whose fields are structs or comparable values.
func Fill[T any](v, d T) T {
	fill(reflect.ValueOf(&v).Elem(), reflect.ValueOf(d))
	return v
}

func fill(v, d reflect.Value) {
	for i := range v.NumField() {
		f := v.Field(i)
		switch {
		case !f.CanSet():
			continue // unexported: not configuration
		case f.Kind() == reflect.Struct:
			fill(f, d.Field(i))
		case f.IsZero():
			f.Set(d.Field(i))
		}
	}
}
