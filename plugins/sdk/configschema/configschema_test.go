package configschema_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/plugins/sdk/configschema"
)

// Deferred values (config strings holding {{ }} references in byoc) pass
// every check that depends on their rendered value, and nothing else is
// relaxed.
func TestValidateDeferred(t *testing.T) {
	s, err := configschema.Compile(`{
	  "type": "object",
	  "required": ["port"],
	  "additionalProperties": false,
	  "properties": {
	    "port": {"type": "integer", "minimum": 1},
	    "debug": {"type": "boolean"},
	    "mode": {"enum": ["fast", "safe"]},
	    "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 3},
	    "size": {"oneOf": [{"type": "integer"}, {"type": "string"}]},
	    "pair": {"type": "array", "uniqueItems": true, "items": {"type": "integer"}},
	    "nested": {"type": "object", "properties": {"n": {"type": "number"}}, "not": {"const": {"n": 1}}},
	    "legacy": false
	  }
	}`)
	if err != nil {
		t.Fatal(err)
	}
	deferred := func(s string) bool { return strings.Contains(s, "{{") }
	tests := []struct {
		name   string
		config map[string]any
		want   []string
	}{
		{"references pass where another type is wanted", map[string]any{
			"port": "{{ .inputs.port }}", "debug": "{{ .inputs.debug }}", "mode": "{{ .inputs.mode }}",
			"name": "{{ .install.name }}", "size": "{{ .inputs.size }}", "pair": []any{"{{ .inputs.a }}", "{{ .inputs.a }}"},
			"nested": map[string]any{"n": "{{ .inputs.n }}"},
		}, nil},
		{"plain values are still checked", map[string]any{"port": "80", "debug": "yes", "mode": "slow", "name": "ABCD"},
			[]string{"debug: got string, want boolean", "mode: must be one of", "name: must be at most 3", "name: is not in the required form", "port: got string, want integer"}},
		{"a reference does not make a forbidden field allowed", map[string]any{"port": 1, "legacy": "{{ .inputs.x }}", "other": "{{ .inputs.y }}"},
			[]string{"legacy: is not allowed", "other: unknown field"}},
		{"a reference does not stand for a missing field", map[string]any{"debug": "{{ .inputs.debug }}"},
			[]string{"port: is required"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := s.ValidateWith(tt.config, configschema.Options{Deferred: deferred})
			if len(got) != len(tt.want) {
				t.Fatalf("diagnostics = %q, want %q", got, tt.want)
			}
			for i := range got {
				if !strings.Contains(got[i].String(), tt.want[i]) {
					t.Errorf("diagnostic %d = %q, want it to contain %q", i, got[i], tt.want[i])
				}
			}
		})
	}
	// Without the option, a reference is just a string.
	if got := s.Validate(map[string]any{"port": "{{ .inputs.port }}"}); len(got) != 1 {
		t.Errorf("Validate without Deferred = %q, want the port's type error", got)
	}
}

func TestUnknownFieldHint(t *testing.T) {
	d, err := configschema.ValidateConfig(`{"type": "object", "additionalProperties": false, "properties": {"script": {}, "name": {}}}`,
		map[string]any{"scrpt": "x"})
	if err != nil {
		t.Fatal(err)
	}
	if len(d) != 1 || d[0].String() != "scrpt: unknown field" || d[0].Hint != "known fields: name, script" {
		t.Fatalf("diagnostics = %+v", d)
	}
}

// A schema whose check of one value would not end, or would apply an
// exponential number of schemas, is refused when compiled, naming where.
func TestCompileRefusesRunawaySchemas(t *testing.T) {
	chain := `{"$defs":{`
	for i := range 30 {
		chain += fmt.Sprintf(`"d%d":{"allOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]},`, i, i+1, i+1)
	}
	chain += `"d30":{"type":"string"}},"$ref":"#/$defs/d0"}`
	for name, tc := range map[string]struct{ schema, want string }{
		"self reference":  {`{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, `schema at /$defs/a: $ref "#/$defs/a": a cycle of references that never descends into the value`},
		"cycle via allOf": {`{"$defs":{"a":{"allOf":[{"$ref":"#/$defs/b"}]},"b":{"not":{"$ref":"#/$defs/a"}}}}`, `a cycle of references that never descends into the value`},
		"doubling chain":  {chain, `would apply more than 10000 schemas`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := configschema.Compile(tc.schema)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	// Recursion that descends into the value is fine.
	s, err := configschema.Compile(`{"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}},"additionalProperties":{"$ref":"#/$defs/n"}}},"$ref":"#/$defs/n"}`)
	if err != nil {
		t.Fatal(err)
	}
	if d := s.Validate(map[string]any{"next": map[string]any{"x": map[string]any{"next": 1}}}); len(d) != 1 || d[0].Field != "next.x.next" {
		t.Fatalf("got %v", d)
	}
}

func TestTypesAt(t *testing.T) {
	s, err := configschema.Compile(`{"type": "object", "properties": {
		"replicas": {"type": "integer"},
		"name": {"type": "string"},
		"env": {"type": "object", "additionalProperties": {"type": "string"}},
		"steps": {"type": "array", "items": {"$ref": "#/$defs/step"}},
		"either": {"anyOf": [{"type": "number"}, {"type": "boolean"}]},
		"free": {}
	}, "$defs": {"step": {"type": "object", "properties": {"timeout": {"type": ["integer", "string"]}}}}}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		loc  []string
		want string
	}{
		{nil, "object"},
		{[]string{"replicas"}, "integer"},
		{[]string{"name"}, "string"},
		{[]string{"env", "X"}, "string"},
		{[]string{"steps", "0", "timeout"}, "integer string"},
		{[]string{"either"}, "boolean number"},
		{[]string{"free"}, ""},
		{[]string{"nope"}, ""},
	} {
		if got := strings.Join(s.TypesAt(tc.loc), " "); got != tc.want {
			t.Errorf("TypesAt(%v) = %q, want %q", tc.loc, got, tc.want)
		}
	}
}

// The keywords authors asked for (issue 29 item 7): patternProperties,
// propertyNames, dependentRequired; a value of the wrong form says so for
// people, with the regular expression in the hint; deprecated is a
// warning, not an error.
func TestAuthorKeywordsAndMessages(t *testing.T) {
	s, err := configschema.Compile(`{
	  "type": "object",
	  "properties": {
	    "labels": {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}, "additionalProperties": {"type": "string"}},
	    "env": {"type": "object", "patternProperties": {"^[A-Z_]+$": {"type": "string"}}, "additionalProperties": false},
	    "tls": {"type": "boolean"}, "cert": {"type": "string"}, "key": {"type": "string", "sensitive": true},
	    "path": {"type": "string", "pattern": "^/", "description": "absolute path of the file"},
	    "old": {"type": "string", "deprecated": true, "description": "use path"}
	  },
	  "dependentRequired": {"tls": ["cert", "key"]}
	}`)
	if err != nil {
		t.Fatal(err)
	}
	ds := s.Validate(map[string]any{
		"labels": map[string]any{"ok": "1", "Bad": "2"},
		"env":    map[string]any{"HOME": "/x", "lower": "y", "PATH": 3},
		"tls":    true, "cert": "c",
		"path": "relative", "old": "x",
	})
	var got []string
	for _, d := range ds {
		got = append(got, d.String()+" | "+d.Hint+" | "+d.Severity)
	}
	want := []string{
		"env.PATH: got integer, want string |  | ",
		"env.lower: unknown field | a name matching the regular expression ^[A-Z_]+$ | ",
		"key: is required when tls is set |  | ",
		"labels.Bad: is not an allowed field name: is not in the required form | must match the regular expression ^[a-z]+$ | ",
		"old: is deprecated | use path | warning",
		"path: is not in the required form (absolute path of the file) | must match the regular expression ^/ | ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("diagnostics:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := len(configschema.Errors(ds)); n != 5 {
		t.Errorf("%d errors, want 5 (the warning is not one)", n)
	}
	if got := s.Sensitive(map[string]any{"key": "hunter22", "cert": "c", "tls": true}); !slices.Equal(got, []string{"hunter22"}) {
		t.Errorf("sensitive values %q", got)
	}
}
