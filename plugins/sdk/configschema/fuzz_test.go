package configschema_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/plugins/sdk/configschema"
)

// FuzzSchema compiles random schemas and validates random documents
// against those that compile. Properties: nothing panics or runs away
// (a $ref cycle must be refused when compiling); validation is
// deterministic (twice the same diagnostics, in Field order, without
// duplicates); a Deferred function that defers nothing changes nothing;
// the schemas true and {} accept the document and false refuses it.
func FuzzSchema(f *testing.F) {
	for _, seed := range [][2]string{
		{`{"type":"object","required":["port"],"properties":{"port":{"type":"integer","minimum":1}},"additionalProperties":false}`, `{"port":8080}`},
		{`{"type":"object","properties":{"port":{"type":"integer"}}}`, `{"port":"x","other":[1,2]}`},
		{`{"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}`, `{"next":{"next":{}}}`},
		{`{"oneOf":[{"type":"string","pattern":"^a+$"},{"type":"number","multipleOf":0.5}],"not":{"const":"aa"}}`, `"aaa"`},
		{`{"type":"array","items":{"enum":[1,"x",null]},"uniqueItems":true,"minItems":1,"maxItems":3}`, `[1,1,"x"]`},
		{`{"anyOf":[{"minLength":2},{"maxLength":0}],"allOf":[{"type":"string"}]}`, `"é"`},
		{`{"type":["object","null"],"minProperties":1,"maxProperties":2,"additionalProperties":{"type":"boolean"}}`, `{"a":true,"b":1,"c":false}`},
		{`{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, `1`},
		{`true`, `{}`},
		{`{"exclusiveMinimum":0,"exclusiveMaximum":1e308,"maximum":-1}`, `0.5`},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, schema, doc string) {
		var v any
		if json.Unmarshal([]byte(doc), &v) != nil {
			return
		}
		for _, trivial := range []string{`true`, `{}`} {
			s, err := configschema.Compile(trivial)
			if err != nil {
				t.Fatal(err)
			}
			if d := s.Validate(v); len(d) != 0 {
				t.Fatalf("schema %s refused %s: %v", trivial, doc, d)
			}
		}
		if s, _ := configschema.Compile(`false`); len(s.Validate(v)) == 0 {
			t.Fatalf("schema false accepted %s", doc)
		}
		s, err := configschema.Compile(schema)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error without a message")
			}
			return
		}
		first := s.Validate(v)
		if again := s.Validate(v); !reflect.DeepEqual(first, again) {
			t.Fatalf("validation is not deterministic:\n%v\n%v", first, again)
		}
		if none := s.ValidateWith(v, configschema.Options{Deferred: func(string) bool { return false }}); !reflect.DeepEqual(first, none) {
			t.Fatalf("deferring nothing changed the result:\n%v\n%v", first, none)
		}
		if !slices.IsSortedFunc(first, func(a, b configschema.Diagnostic) int { return strings.Compare(a.Field, b.Field) }) {
			t.Fatalf("diagnostics out of field order: %v", first)
		}
		for i := 1; i < len(first); i++ {
			if first[i] == first[i-1] {
				t.Fatalf("diagnostic twice: %v", first[i])
			}
		}
		for _, d := range first {
			if d.Message == "" {
				t.Fatalf("a diagnostic without a message: %+v", d)
			}
		}
	})
}
