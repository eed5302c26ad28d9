package sdk

import "github.com/byoc-dev/byoc/plugins/sdk/configschema"

// Schema is a compiled JSON Schema of a component config or of outputs.
// See package configschema for the part of JSON Schema it checks.
type Schema = configschema.Schema

// Diagnostic is one problem found in a config: an error, or with
// Severity SeverityWarning a warning, which the agent logs and which lets
// the job run.
type Diagnostic = configschema.Diagnostic

// SeverityWarning marks a Diagnostic as a warning.
const SeverityWarning = configschema.SeverityWarning

// CompileSchema compiles a JSON Schema document, refusing keywords the SDK
// does not check with the JSON path of the first.
func CompileSchema(schema string) (*Schema, error) { return configschema.Compile(schema) }

// ValidateConfig checks config against the JSON Schema schema and returns
// one diagnostic per problem, naming its field. An error means the schema
// itself is broken. An empty schema accepts everything.
func ValidateConfig(schema string, config map[string]any) ([]Diagnostic, error) {
	return configschema.ValidateConfig(schema, config)
}

// FieldPath writes a JSON value's location as a field path: ["steps", "0",
// "script"] becomes "steps[0].script".
func FieldPath(loc []string) string { return configschema.FieldPath(loc) }
