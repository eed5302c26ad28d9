package config

import (
	"encoding"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/byoc-dev/byoc/schema/app/diag"
)

// decoder fills the Go types from parsed TOML, reporting every problem
// (unknown keys, wrong types, missing required keys, values outside an
// enum) rather than stopping at the first, and records the line of every
// key path so later checks can point at it.
type decoder struct {
	file  string
	ds    *diag.List
	lines map[string]int // key path -> line, for this file
}

func (d *decoder) errf(line int, key, hint, format string, args ...any) {
	d.ds.Addf(d.file, line, key, hint, format, args...)
}

// A Field is what a struct field's tags say (see the list above Metadata).
type Field struct {
	Key      string // the TOML key
	Index    int    // the field's index in its struct
	Type     reflect.Type
	Required bool
	Enum     []string
	Doc      string
	Default  string // the default tag, documentation only
}

// Fields returns the fields of struct type t that have a TOML key, in
// declaration order.
func Fields(t reflect.Type) []Field {
	var out []Field
	for i := range t.NumField() {
		f := t.Field(i)
		key := f.Tag.Get("toml")
		if key == "" || key == "-" || !f.IsExported() {
			continue
		}
		fi := Field{Key: key, Index: i, Type: f.Type, Required: f.Tag.Get("required") == "true",
			Doc: f.Tag.Get("doc"), Default: f.Tag.Get("default")}
		if e := f.Tag.Get("enum"); e != "" {
			fi.Enum = strings.Split(e, ",")
		}
		out = append(out, fi)
	}
	return out
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

var stringListType = reflect.TypeFor[StringList]()

// decode stores v into rv, whose key path is path.
func (d *decoder) decode(path string, v *value, rv reflect.Value) {
	d.lines[path] = v.line
	t := rv.Type()
	if reflect.PointerTo(t).Implements(textUnmarshaler) {
		if v.kind != kString {
			d.errf(v.line, path, "", "must be a string, not %s", v.kind)
			return
		}
		if err := rv.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(v.str)); err != nil {
			d.errf(v.line, path, "", "%v", err)
		}
		return
	}
	if t == stringListType && v.kind == kString {
		rv.Set(reflect.ValueOf(StringList{v.str}))
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		p := reflect.New(t.Elem())
		d.decode(path, v, p.Elem())
		rv.Set(p)
	case reflect.Interface:
		d.index(path, v)
		rv.Set(reflect.ValueOf(v.plain()))
	case reflect.String:
		if v.kind != kString {
			d.errf(v.line, path, "", "must be a string, not %s", v.kind)
			return
		}
		rv.SetString(v.str)
	case reflect.Bool:
		if v.kind != kBool {
			d.errf(v.line, path, "write true or false", "must be a boolean, not %s", v.kind)
			return
		}
		rv.SetBool(v.b)
	case reflect.Int, reflect.Int64:
		if v.kind != kNumber || !v.isInt {
			d.errf(v.line, path, "", "must be a whole number, not %s", describe(v))
			return
		}
		rv.SetInt(v.int)
	case reflect.Float64:
		if v.kind != kNumber || math.IsNaN(v.num) || math.IsInf(v.num, 0) {
			d.errf(v.line, path, "", "must be a finite number, not %s", describe(v))
			return
		}
		rv.SetFloat(v.num)
	case reflect.Slice:
		if v.kind != kList {
			hint := ""
			if t.Elem().Kind() == reflect.String && v.kind == kString {
				hint = fmt.Sprintf("write [%q]", v.str)
			}
			d.errf(v.line, path, hint, "must be an array, not %s", v.kind)
			return
		}
		s := reflect.MakeSlice(t, len(v.list), len(v.list))
		for i, e := range v.list {
			d.decode(fmt.Sprintf("%s[%d]", path, i), e, s.Index(i))
		}
		rv.Set(s)
	case reflect.Map:
		if v.kind != kTable {
			d.errf(v.line, path, "", "must be a table, not %s", v.kind)
			return
		}
		m := reflect.MakeMapWithSize(t, len(v.table.keys))
		for _, k := range v.table.keys {
			ent := v.table.fields[k]
			ev := reflect.New(t.Elem()).Elem()
			d.lines[diag.Join(path, k)] = ent.keyLine
			d.decode(diag.Join(path, k), ent.val, ev)
			m.SetMapIndex(reflect.ValueOf(k), ev)
		}
		rv.Set(m)
	case reflect.Struct:
		if v.kind != kTable {
			d.errf(v.line, path, "", "must be a table, not %s", v.kind)
			return
		}
		d.decodeStruct(path, v, rv)
	default:
		panic(fmt.Sprintf("config: no decoder for %s", t))
	}
}

func (d *decoder) decodeStruct(path string, v *value, rv reflect.Value) {
	fields := Fields(rv.Type())
	known := make([]string, len(fields))
	for i, f := range fields {
		known[i] = f.Key
	}
	for _, k := range v.table.keys {
		ent := v.table.fields[k]
		i := slices.IndexFunc(fields, func(f Field) bool { return f.Key == k })
		if i < 0 {
			hint := diag.DidYouMean(k, known)
			if hint == "" {
				hint = "known keys: " + strings.Join(known, ", ")
			}
			d.errf(ent.keyLine, diag.Join(path, k), hint, "unknown key")
			continue
		}
		f := fields[i]
		d.lines[diag.Join(path, k)] = ent.keyLine
		d.decode(diag.Join(path, k), ent.val, rv.Field(f.Index))
		if f.Enum != nil && ent.val.kind == kString && !slices.Contains(f.Enum, ent.val.str) {
			hint := diag.DidYouMean(ent.val.str, f.Enum)
			if hint == "" {
				hint = "one of " + diag.QuoteList(f.Enum)
			}
			d.errf(ent.keyLine, diag.Join(path, k), hint, "%q is not allowed", ent.val.str)
		}
	}
	for _, f := range fields {
		if f.Required && v.table.get(f.Key) == nil {
			where := "this table"
			if path == "" {
				where = "the file"
			}
			d.errf(v.line, diag.Join(path, f.Key), "", "is required but %s does not set it", where)
		}
	}
}

// index records the lines of every key inside a free-form value (such as
// component config), so checks of references inside it can point at them.
func (d *decoder) index(path string, v *value) {
	d.lines[path] = v.line
	switch v.kind {
	case kList:
		for i, e := range v.list {
			d.index(fmt.Sprintf("%s[%d]", path, i), e)
		}
	case kTable:
		for _, k := range v.table.keys {
			d.index(diag.Join(path, k), v.table.fields[k].val)
			d.lines[diag.Join(path, k)] = v.table.fields[k].keyLine
		}
	}
}

func describe(v *value) string {
	if v.kind == kNumber {
		return fmt.Sprintf("%v", v.num)
	}
	return v.kind.String()
}
