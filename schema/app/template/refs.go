// Package template is the {{ }} references of config strings: finding
// them (field chains such as {{ .inputs.NAME }} only, parsed with
// text/template/parse, so a config says what it needs and nothing runs)
// and rendering them for an install. Secrets stay references until the
// agent replaces them (ReplaceSecrets): imsd never knows their values.
package template

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/template/parse"

	"github.com/byoc-dev/byoc/schema/app/diag"
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

// A Problem is a reference that is not well formed: what is wrong and
// what would be right.
type Problem struct {
	Message, Hint string
}

// HasRefs reports whether a config string holds a {{ }} reference, so its
// value is known only once rendered for an install.
func HasRefs(s string) bool { return strings.Contains(s, "{{") }

// Refs returns the references in s. A string without {{ is plain
// text. Only field chains are allowed inside {{ }}: no functions, pipes or
// control structures, so a config says what it needs and nothing runs.
func Refs(s string) ([]Ref, *Problem) {
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
		return nil, &Problem{Message: "reference syntax: " + msg, Hint: "write references as {{ .inputs.NAME }}"}
	}
	var out []Ref
	for _, n := range trees["config"].Root.Nodes {
		switch n := n.(type) {
		case *parse.TextNode:
		case *parse.ActionNode:
			f, ok := plainField(n)
			if !ok {
				return nil, &Problem{Message: fmt.Sprintf("{{%s}} is not a plain reference", n.Pipe), Hint: "only field references such as {{ .inputs.NAME }} are allowed, no functions or pipes"}
			}
			r, e := refOf(f.Ident)
			if e != nil {
				return nil, e
			}
			out = append(out, r)
		default:
			return nil, &Problem{Message: fmt.Sprintf("%q is not allowed in config", n.String()), Hint: "only field references such as {{ .inputs.NAME }} are allowed, no if, range or with"}
		}
	}
	return out, nil
}

func refOf(ident []string) (Ref, *Problem) {
	whole := "." + strings.Join(ident, ".")
	bad := func(want string) (Ref, *Problem) {
		return Ref{}, &Problem{Message: fmt.Sprintf("{{ %s }} is not a reference byoc knows", whole), Hint: "write " + want}
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
	hint := diag.DidYouMean(ident[0], refRoots)
	if hint == "" {
		hint = "references start with ." + strings.Join(refRoots, ", .")
	}
	return Ref{}, &Problem{Message: fmt.Sprintf("{{ %s }}: unknown root %q", whole, ident[0]), Hint: hint}
}

// EachString calls fn for every string inside a free-form config value,
// with its key path, in key order.
func EachString(path string, v any, fn func(path, s string)) {
	switch v := v.(type) {
	case string:
		fn(path, v)
	case []any:
		for i, e := range v {
			EachString(fmt.Sprintf("%s[%d]", path, i), e, fn)
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			EachString(diag.Join(path, k), v[k], fn)
		}
	}
}
