// Package diff says what changed between two app configs: per component,
// action, input, secret and install, the key paths that changed (in the
// names the files use) with their old and new values (a sensitive input's
// masked), and which script and policy files changed. imsd shows it for a
// pushed revision, and the planner uses Fields to say why a component is
// redeployed.
package diff

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/byoc-dev/byoc/schema/app/config"
	"github.com/byoc-dev/byoc/schema/app/diag"
)

// A Change is one difference between two app configs.
type Change struct {
	// Kind is component, action, debug (a debug command), input, secret, install, or a file's
	// section (app, permissions, policies, break_glass).
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Op is added, removed or changed.
	Op string `json:"op"`
	// Fields are the key paths that changed (for changed).
	Fields []string `json:"fields,omitempty"`
	// Values are the old and new values of Fields, in the same order.
	Values []Value `json:"values,omitempty"`
}

// Value is one changed key path's old and new values, JSON-shaped (nil
// where the key is absent). A sensitive input's values are Masked instead.
type Value struct {
	Field string `json:"field"`
	Old   any    `json:"old"`
	New   any    `json:"new"`
}

// Masked stands for a sensitive input's value in a Value.
const Masked = "(sensitive)"

func (c Change) String() string {
	s := fmt.Sprintf("%s %s %s", c.Op, c.Kind, c.Name)
	if len(c.Fields) > 0 {
		s += ": " + strings.Join(c.Fields, ", ")
	}
	return s
}

// Apps returns what changed from old to new, per component, action,
// input, secret and install, and per remaining section.
func Apps(old, new *config.App) []Change {
	var out []Change
	// A value is masked when its input is sensitive in either config.
	sensitive := map[string]bool{}
	for _, a := range []*config.App{old, new} {
		for _, n := range a.SensitiveInputs() {
			sensitive[n] = true
		}
	}
	masked := func(kind, name, field string) bool {
		switch kind {
		case "input":
			return sensitive[name] && field == "default"
		case "install":
			return strings.HasPrefix(field, "inputs.") && sensitive[strings.TrimPrefix(field, "inputs.")]
		}
		return false
	}
	named := func(kind string, a, b map[string]any) {
		for _, n := range slices.Sorted(maps.Keys(union(a, b))) {
			x, inOld := a[n]
			y, inNew := b[n]
			switch {
			case !inOld:
				out = append(out, Change{Kind: kind, Name: n, Op: "added"})
			case !inNew:
				out = append(out, Change{Kind: kind, Name: n, Op: "removed"})
			default:
				if vs := Values("", plainOf(x), plainOf(y)); len(vs) > 0 {
					c := Change{Kind: kind, Name: n, Op: "changed"}
					for _, v := range vs {
						if masked(kind, n, v.Field) {
							v.Old, v.New = maskOf(v.Old), maskOf(v.New)
						}
						c.Fields, c.Values = append(c.Fields, v.Field), append(c.Values, v)
					}
					out = append(out, c)
				}
			}
		}
	}
	named("component", componentsByName(old), componentsByName(new))
	named("action", byName(old.Actions, func(a *config.Action) string { return a.Name }), byName(new.Actions, func(a *config.Action) string { return a.Name }))
	named("debug", byName(old.DebugCommands, func(d *config.DebugCommand) string { return d.Name }), byName(new.DebugCommands, func(d *config.DebugCommand) string { return d.Name }))
	named("input", byName(old.Inputs.Inputs, func(i config.Input) string { return i.Name }), byName(new.Inputs.Inputs, func(i config.Input) string { return i.Name }))
	named("secret", byName(old.Secrets.Secrets, func(s config.Secret) string { return s.Name }), byName(new.Secrets.Secrets, func(s config.Secret) string { return s.Name }))
	named("install", byName(old.Installs, func(i *config.InstallFile) string { return i.Name }), byName(new.Installs, func(i *config.InstallFile) string { return i.Name }))
	for _, sec := range []struct {
		kind string
		a, b any
	}{
		{"app", old.Metadata, new.Metadata},
		{"input_groups", old.Inputs.Groups, new.Inputs.Groups},
		{"permissions", old.Permissions, new.Permissions},
		{"policies", old.Policies, new.Policies},
		{"break_glass", old.BreakGlass, new.BreakGlass},
	} {
		if vs := Values("", plainOf(sec.a), plainOf(sec.b)); len(vs) > 0 {
			c := Change{Kind: sec.kind, Name: sec.kind, Op: "changed", Values: vs}
			for _, v := range vs {
				c.Fields = append(c.Fields, v.Field)
			}
			out = append(out, c)
		}
	}
	// Script and policy files are part of the actions and policies that
	// name them.
	for _, p := range slices.Sorted(maps.Keys(union(old.Files, new.Files))) {
		if strings.HasSuffix(p, ".toml") {
			continue
		}
		a, inOld := old.Files[p]
		b, inNew := new.Files[p]
		switch {
		case !inOld:
			out = append(out, Change{Kind: "file", Name: p, Op: "added"})
		case !inNew:
			out = append(out, Change{Kind: "file", Name: p, Op: "removed"})
		case string(a) != string(b):
			out = append(out, Change{Kind: "file", Name: p, Op: "changed"})
		}
	}
	return out
}

func componentsByName(a *config.App) map[string]any {
	m := byName(a.Components, func(c *config.Component) string { return c.Name })
	if a.Sandbox != nil {
		m["sandbox"] = a.Sandbox
	}
	return m
}

func byName[T any](s []T, name func(T) string) map[string]any {
	m := make(map[string]any, len(s))
	for _, x := range s {
		m[name(x)] = x
	}
	return m
}

// union returns the keys of a and b together (values from b win).
func union[V any](a, b map[string]V) map[string]V {
	out := make(map[string]V, len(a)+len(b))
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}

// plainOf turns a config value into JSON-shaped data, keyed by TOML key
// names, so changes are reported with the names the files use.
func plainOf(v any) any {
	rv := reflect.ValueOf(v)
	return plainValue(rv)
}

func plainValue(rv reflect.Value) any {
	if !rv.IsValid() {
		return nil
	}
	if rv.Type() == durationType {
		return config.Duration(rv.Int()).String()
	}
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return nil
		}
		return plainValue(rv.Elem())
	case reflect.Struct:
		m := map[string]any{}
		for _, f := range config.Fields(rv.Type()) {
			m[f.Key] = plainValue(rv.Field(f.Index))
		}
		return m
	case reflect.Map:
		m := map[string]any{}
		for _, k := range rv.MapKeys() {
			m[k.String()] = plainValue(rv.MapIndex(k))
		}
		return m
	case reflect.Slice:
		if rv.IsNil() {
			return []any{}
		}
		l := make([]any, rv.Len())
		for i := range l {
			l[i] = plainValue(rv.Index(i))
		}
		return l
	}
	// Numbers compare as JSON does, so 3 and 3.0 are equal.
	b, _ := json.Marshal(rv.Interface())
	var x any
	json.Unmarshal(b, &x) //nolint:errcheck // our own encoding
	return x
}

// maskOf is Masked for a value that is there, nil for one that is not.
func maskOf(v any) any {
	if v == nil {
		return nil
	}
	return Masked
}

// Fields lists the key paths (under path) where two config values differ,
// descending into tables and stopping at the first level where they are
// not both tables.
func Fields(path string, a, b any) []string {
	var out []string
	for _, v := range Values(path, a, b) {
		out = append(out, v.Field)
	}
	return out
}

// Values is Fields with each path's old and new values.
func Values(path string, a, b any) []Value {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if !aok || !bok {
		if reflect.DeepEqual(a, b) {
			return nil
		}
		return []Value{{Field: cmp.Or(path, "(whole)"), Old: a, New: b}}
	}
	var out []Value
	for _, k := range slices.Sorted(maps.Keys(union(am, bm))) {
		out = append(out, Values(diag.Join(path, k), am[k], bm[k])...)
	}
	return out
}

var durationType = reflect.TypeFor[config.Duration]()
