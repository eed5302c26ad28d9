package sdk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Schema is a compiled JSON Schema (draft 2020-12 unless it says
// otherwise) of a component config or of outputs.
type Schema struct {
	s *jsonschema.Schema
}

// CompileSchema compiles a JSON Schema document. The schema may not refer
// to other documents.
func CompileSchema(schema string) (*Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("config schema is not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// A schema must not make the agent read files or the network.
	c.UseLoader(noLoader{})
	const url = "byoc:///schema.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("config schema: %w", err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("config schema: %w", err)
	}
	return &Schema{s: s}, nil
}

type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schema refers to %s: only references inside the schema are allowed", url)
}

// Validate checks v (a config or outputs map as decoded from JSON) and
// returns one diagnostic per problem, each naming its field as a path such
// as "steps[0].script"; none means v is valid.
func (s *Schema) Validate(v any) []Diagnostic {
	// Round-trip through JSON so numbers are json.Number and every value has
	// a JSON type, whatever Go types the caller used.
	b, err := json.Marshal(v)
	if err != nil {
		return []Diagnostic{{Message: "not JSON: " + err.Error()}}
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return []Diagnostic{{Message: "not JSON: " + err.Error()}}
	}
	err = s.s.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []Diagnostic{{Message: err.Error()}}
	}
	var diags []Diagnostic
	collect(ve, &diags)
	slices.SortStableFunc(diags, func(a, b Diagnostic) int { return strings.Compare(a.Field, b.Field) })
	return slices.CompactFunc(diags, func(a, b Diagnostic) bool { return a == b })
}

var printer = sync.OnceValue(func() *message.Printer { return message.NewPrinter(language.English) })

// collect turns the leaves of a validation error tree into diagnostics.
func collect(e *jsonschema.ValidationError, out *[]Diagnostic) {
	if len(e.Causes) > 0 {
		for _, c := range e.Causes {
			collect(c, out)
		}
		return
	}
	field := FieldPath(e.InstanceLocation)
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		for _, m := range k.Missing {
			*out = append(*out, Diagnostic{Field: joinField(field, m), Message: "is required"})
		}
	case *kind.AdditionalProperties:
		for _, p := range k.Properties {
			*out = append(*out, Diagnostic{Field: joinField(field, p), Message: "unknown field"})
		}
	default:
		*out = append(*out, Diagnostic{Field: field, Message: e.ErrorKind.LocalizedString(printer())})
	}
}

// FieldPath writes a JSON value's location as a field path: ["steps", "0",
// "script"] becomes "steps[0].script".
func FieldPath(loc []string) string {
	var b strings.Builder
	for _, tok := range loc {
		if _, err := strconv.Atoi(tok); err == nil {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

func joinField(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// ValidateConfig checks config against the JSON Schema schema and returns
// one diagnostic per problem, naming its field. An error means the schema
// itself is broken. An empty schema accepts everything.
func ValidateConfig(schema string, config map[string]any) ([]Diagnostic, error) {
	if strings.TrimSpace(schema) == "" {
		return nil, nil
	}
	s, err := CompileSchema(schema)
	if err != nil {
		return nil, err
	}
	if config == nil {
		config = map[string]any{}
	}
	return s.Validate(config), nil
}
