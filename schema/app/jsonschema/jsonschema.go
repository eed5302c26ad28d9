// Package jsonschema generates the JSON Schemas of the app config's files
// from the Go types of package config and their struct tags, so editors
// check the same keys the decoder does. The schemas are committed in this
// directory (`make generate` runs internal/genschema; a test and `make
// check-generate` fail when they are out of date).
package jsonschema

import (
	"encoding/json"
	"reflect"

	"github.com/byoc-dev/byoc/schema/app/config"
)

// Files are the JSON Schemas of the app config's files, by file name in
// schema/app/jsonschema/.
func Files() map[string][]byte {
	kinds := []struct {
		file, title, match string
		t                  reflect.Type
	}{
		{"app.schema.json", "byoc app.toml", "app.toml", reflect.TypeFor[config.Metadata]()},
		{"inputs.schema.json", "byoc inputs.toml", "inputs.toml", reflect.TypeFor[config.InputsFile]()},
		{"secrets.schema.json", "byoc secrets.toml", "secrets.toml", reflect.TypeFor[config.SecretsFile]()},
		{"component.schema.json", "byoc components/*.toml and sandbox.toml", "components/*.toml, sandbox.toml", reflect.TypeFor[config.Component]()},
		{"action.schema.json", "byoc actions/*.toml", "actions/*.toml", reflect.TypeFor[config.Action]()},
		{"debug.schema.json", "byoc debug/*.toml", "debug/*.toml", reflect.TypeFor[config.DebugCommand]()},
		{"permissions.schema.json", "byoc permissions.toml", "permissions.toml", reflect.TypeFor[config.Permissions]()},
		{"policies.schema.json", "byoc policies.toml", "policies.toml", reflect.TypeFor[config.PoliciesFile]()},
		{"break_glass.schema.json", "byoc break_glass.toml", "break_glass.toml", reflect.TypeFor[config.BreakGlass]()},
		{"telemetry.schema.json", "byoc telemetry.toml", "telemetry.toml", reflect.TypeFor[config.Telemetry]()},
		{"install.schema.json", "byoc installs/*.toml", "installs/*.toml", reflect.TypeFor[config.InstallFile]()},
	}
	out := map[string][]byte{}
	for _, k := range kinds {
		s := schemaOf(k.t)
		s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
		s["$id"] = "https://byoc.dev/schema/app/" + k.file
		s["title"] = k.title
		s["description"] = "Generated from the Go types in schema/app/config; applies to " + k.match + " in an app directory."
		b, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			panic(err)
		}
		out[k.file] = append(b, '\n')
	}
	return out
}

var durationType = reflect.TypeFor[config.Duration]()
var stringListType = reflect.TypeFor[config.StringList]()

func schemaOf(t reflect.Type) map[string]any {
	if t == durationType {
		return map[string]any{"type": "string", "pattern": `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`}
	}
	if t == stringListType {
		return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "array", "items": map[string]any{"type": "string"}}}}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return schemaOf(t.Elem())
	case reflect.Interface:
		return map[string]any{}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int64:
		return map[string]any{"type": "integer"}
	case reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": schemaOf(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": schemaOf(t.Elem())}
	case reflect.Struct:
		props := map[string]any{}
		var required []string
		for _, f := range config.Fields(t) {
			p := schemaOf(f.Type)
			if f.Doc != "" {
				p["description"] = f.Doc
			}
			if f.Enum != nil {
				p["enum"] = f.Enum
			}
			if f.Default != "" {
				p["default"] = defaultValue(f.Type, f.Default)
			}
			if f.Required {
				required = append(required, f.Key)
			}
			props[f.Key] = p
		}
		s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		if len(required) > 0 {
			s["required"] = required
		}
		return s
	}
	panic("jsonschema: no schema for " + t.String())
}

func defaultValue(t reflect.Type, d string) any {
	if t == durationType {
		return d
	}
	switch t.Kind() {
	case reflect.Bool:
		return d == "true"
	case reflect.Int, reflect.Int64:
		var n int
		json.Unmarshal([]byte(d), &n) //nolint:errcheck // tags are ours
		return n
	}
	return d
}
