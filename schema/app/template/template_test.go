package template

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestRefsAllowsFieldChainsOnly(t *testing.T) {
	refs, p := Refs("{{ .inputs.a }}-{{ .components.db.outputs.url }}-{{ .install.id }}")
	if p != nil {
		t.Fatal(p.Message)
	}
	if got := fmt.Sprint(refs); got != "[.inputs.a .components.db.outputs.url .install.id]" {
		t.Errorf("refs = %s", got)
	}
	for s, want := range map[string]string{
		`{{ $x := .inputs.a }}`:         "is not a plain reference",
		`{{ .inputs.a | .inputs.b }}`:   "is not a plain reference",
		`{{ .inputs.a | printf "%s" }}`: `function "printf" not defined`,
		`{{ if .inputs.a }}x{{ end }}`:  "is not allowed in config",
		`{{ .inptus.a }}`:               `unknown root "inptus"`,
		`{{ .install.zone }}`:           "is not a reference byoc knows",
		`{{ .inputs.a `:                 "reference syntax",
	} {
		if _, p := Refs(s); p == nil || !strings.Contains(p.Message, want) {
			t.Errorf("%s: got %+v, want a problem saying %q", s, p, want)
		}
	}
}

func TestRenderKeepsTheTypeOfAWholeReference(t *testing.T) {
	resolve := func(r Ref) (any, error) {
		switch r.Name {
		case "n":
			return int64(3), nil
		case "f":
			return 2.5, nil
		}
		return nil, fmt.Errorf("no %s", r)
	}
	cfg := map[string]any{
		"whole": "{{ .inputs.n }}",
		"typed": map[string]any{"n": "{{ .inputs.n }}"},
		"text":  "x{{ .inputs.n }}/{{ .inputs.f }}",
		"list":  []any{"plain", "{{ .inputs.f }}"},
	}
	// Where the schema wants a number (typed.n here), a whole reference
	// keeps the number; everywhere else a template in a string renders to
	// a string.
	var asked []string
	v, err := RenderValue("config", cfg, resolve, func(loc []string) bool {
		asked = append(asked, strings.Join(loc, "/"))
		return strings.Join(loc, "/") == "typed/n"
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(v); got != "map[list:[plain 2.5] text:x3/2.5 typed:map[n:3] whole:3]" {
		t.Errorf("rendered %s", got)
	}
	m := v.(map[string]any)
	if _, ok := m["whole"].(string); !ok {
		t.Errorf("a template inside a string rendered to %T, want string", m["whole"])
	}
	if _, ok := m["typed"].(map[string]any)["n"].(int64); !ok {
		t.Error("a whole reference where the schema wants a number is not a number")
	}
	if _, ok := m["list"].([]any)[1].(string); !ok {
		t.Error("a list item template did not render to a string")
	}
	slices.Sort(asked)
	if strings.Join(asked, " ") != "list/1 text typed/n whole" {
		t.Errorf("keepType asked about %v", asked)
	}
	if v, _ := RenderValue("config", cfg, resolve, nil); fmt.Sprintf("%T", v.(map[string]any)["whole"]) != "string" {
		t.Error("with no keepType, a whole reference is not a string")
	}
	_, err = RenderValue("config", map[string]any{"b": "{{ .inputs.zz }}", "a": "{{ .inputs.yy }}"}, resolve, nil)
	if err == nil || err.Error() != "config.a: no .inputs.yy" {
		t.Errorf("err = %v, want the first failing key in key order", err)
	}
}

func TestReplaceSecrets(t *testing.T) {
	lookup := func(n string) (string, bool) { return map[string]string{"tok": "s3cret"}[n], n == "tok" }
	got, err := ReplaceSecrets("a="+SecretRef("tok")+" b={{- .secrets.tok -}}", lookup)
	if err != nil || got != "a=s3cret b=s3cret" {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := ReplaceSecrets("{{ .secrets.nope }}", lookup); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("a missing secret: %v", err)
	}
}

func TestMergeMergesTablesAndReplacesTheRest(t *testing.T) {
	base := map[string]any{"a": map[string]any{"x": 1, "y": 2}, "l": []any{1}}
	got := Merge(base, map[string]any{"a": map[string]any{"y": 3}, "l": []any{2}})
	if fmt.Sprint(got) != "map[a:map[x:1 y:3] l:[2]]" || fmt.Sprint(base) != "map[a:map[x:1 y:2] l:[1]]" {
		t.Errorf("merged %v, base now %v", got, base)
	}
}
