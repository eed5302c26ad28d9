package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/template/parse"
)

// A Ref is one {{ }} reference in a config string.
type Ref struct {
	// Root is install, inputs, sandbox, components or secrets.
	Root string
	// Name is the input, secret or component named (empty for install).
	Name string
	// Output is the output key for sandbox and component references.
	Output string
	// Field is the install field (id or name) for install references.
	Field string
}

func (r Ref) String() string {
	switch r.Root {
	case "install":
		return ".install." + r.Field
	case "sandbox":
		return ".sandbox.outputs." + r.Output
	case "components":
		return ".components." + r.Name + ".outputs." + r.Output
	}
	return "." + r.Root + "." + r.Name
}

var refRoots = []string{"install", "inputs", "sandbox", "components", "secrets"}

// refError is a reference that is not well formed.
type refError struct {
	msg, hint string
}

// findRefs returns the references in s. A string without {{ is plain
// text. Only field chains are allowed inside {{ }}: no functions, pipes or
// control structures, so a config says what it needs and nothing runs.
func findRefs(s string) ([]Ref, *refError) {
	if !HasRefs(s) {
		return nil, nil
	}
	trees, err := parse.Parse("config", s, "{{", "}}")
	if err != nil {
		msg := err.Error()
		// "template: config:1: unexpected ..." -> "unexpected ..."
		if i := strings.Index(msg, "config:"); i >= 0 {
			if j := strings.Index(msg[i+len("config:"):], ": "); j >= 0 {
				msg = msg[i+len("config:")+j+2:]
			}
		}
		return nil, &refError{msg: "reference syntax: " + msg, hint: "write references as {{ .inputs.NAME }}"}
	}
	var out []Ref
	for _, n := range trees["config"].Root.Nodes {
		switch n := n.(type) {
		case *parse.TextNode:
		case *parse.ActionNode:
			f, ok := plainField(n)
			if !ok {
				return nil, &refError{msg: fmt.Sprintf("{{%s}} is not a plain reference", n.Pipe), hint: "only field references such as {{ .inputs.NAME }} are allowed, no functions or pipes"}
			}
			r, e := refOf(f.Ident)
			if e != nil {
				return nil, e
			}
			out = append(out, r)
		default:
			return nil, &refError{msg: fmt.Sprintf("%q is not allowed in config", n.String()), hint: "only field references such as {{ .inputs.NAME }} are allowed, no if, range or with"}
		}
	}
	return out, nil
}

func refOf(ident []string) (Ref, *refError) {
	whole := "." + strings.Join(ident, ".")
	bad := func(want string) (Ref, *refError) {
		return Ref{}, &refError{msg: fmt.Sprintf("{{ %s }} is not a reference byoc knows", whole), hint: "write " + want}
	}
	switch ident[0] {
	case "install":
		if len(ident) != 2 || (ident[1] != "id" && ident[1] != "name") {
			return bad("{{ .install.id }} or {{ .install.name }}")
		}
		return Ref{Root: "install", Field: ident[1]}, nil
	case "inputs", "secrets":
		if len(ident) != 2 {
			return bad(fmt.Sprintf("{{ .%s.NAME }}", ident[0]))
		}
		return Ref{Root: ident[0], Name: ident[1]}, nil
	case "sandbox":
		if len(ident) != 3 || ident[1] != "outputs" {
			return bad("{{ .sandbox.outputs.NAME }}")
		}
		return Ref{Root: "sandbox", Output: ident[2]}, nil
	case "components":
		if len(ident) != 4 || ident[2] != "outputs" {
			return bad("{{ .components.NAME.outputs.KEY }}")
		}
		return Ref{Root: "components", Name: ident[1], Output: ident[3]}, nil
	}
	hint := didYouMean(ident[0], refRoots)
	if hint == "" {
		hint = "references start with ." + strings.Join(refRoots, ", .")
	}
	return Ref{}, &refError{msg: fmt.Sprintf("{{ %s }}: unknown root %q", whole, ident[0]), hint: hint}
}

// stringsIn calls fn for every string inside a free-form config value,
// with its key path.
func stringsIn(path string, v any, fn func(path, s string)) {
	switch v := v.(type) {
	case string:
		fn(path, v)
	case []any:
		for i, e := range v {
			stringsIn(fmt.Sprintf("%s[%d]", path, i), e, fn)
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			stringsIn(join(path, k), v[k], fn)
		}
	}
}
