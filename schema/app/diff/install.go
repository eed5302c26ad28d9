package diff

import (
	"maps"
	"slices"

	"github.com/byoc-dev/byoc/schema/app/config"
	"github.com/byoc-dev/byoc/schema/app/template"
)

// InstallSide is what one install brings to one revision: its own input
// values and its overrides of component config, by component name.
type InstallSide struct {
	Inputs    map[string]string
	Overrides map[string]map[string]any
}

// Install says what changes for one install from revision old to new:
// for each component, its config as the install gets it (the install's
// override merged over the component's, unrendered: {{ }} references
// stay as written), key by key; and for each input, the value it takes
// (the install's own, else install_defaults.inputs, else the input's
// default), a sensitive one's masked. Components come first, then
// inputs, each in name order.
func Install(old, new *config.App, o, n InstallSide) []Change {
	var out []Change
	oc, nc := componentsByName(old), componentsByName(new)
	for _, name := range slices.Sorted(maps.Keys(union(oc, nc))) {
		x, inOld := oc[name]
		y, inNew := nc[name]
		switch {
		case !inOld:
			out = append(out, Change{Kind: "component", Name: name, Op: "added"})
		case !inNew:
			out = append(out, Change{Kind: "component", Name: name, Op: "removed"})
		default:
			a := plainOf(template.Merge(x.(*config.Component).Config, o.Overrides[name]))
			b := plainOf(template.Merge(y.(*config.Component).Config, n.Overrides[name]))
			if vs := Values("", a, b); len(vs) > 0 {
				c := Change{Kind: "component", Name: name, Op: "changed", Values: vs}
				for _, v := range vs {
					c.Fields = append(c.Fields, v.Field)
				}
				out = append(out, c)
			}
		}
	}
	sensitive := map[string]bool{}
	for _, a := range []*config.App{old, new} {
		for _, s := range a.SensitiveInputs() {
			sensitive[s] = true
		}
	}
	oi, ni := effectiveInputs(old, o.Inputs), effectiveInputs(new, n.Inputs)
	for _, name := range slices.Sorted(maps.Keys(union(oi, ni))) {
		a, had := oi[name]
		b, has := ni[name]
		if had == has && a == b {
			continue
		}
		v := Value{Field: "value"}
		if had {
			v.Old = a
		}
		if has {
			v.New = b
		}
		if sensitive[name] {
			v.Old, v.New = maskOf(v.Old), maskOf(v.New)
		}
		op := "changed"
		switch {
		case !had:
			op = "added"
		case !has:
			op = "removed"
		}
		out = append(out, Change{Kind: "input", Name: name, Op: op, Fields: []string{"value"}, Values: []Value{v}})
	}
	return out
}

// effectiveInputs is the value of every input an install of app a gets
// (own values win over install_defaults.inputs, which win over defaults),
// as text; an input set nowhere is left out. Values the install sets for
// inputs the app does not declare are left out too.
func effectiveInputs(a *config.App, own map[string]string) map[string]string {
	out := map[string]string{}
	for _, in := range a.Inputs.Inputs {
		if in.Default != nil {
			out[in.Name] = config.InputText(in.Default)
		}
		if v, ok := a.Metadata.InstallDefaults.Inputs[in.Name]; ok {
			out[in.Name] = config.InputText(v)
		}
		if v, ok := own[in.Name]; ok {
			out[in.Name] = v
		}
	}
	return out
}
