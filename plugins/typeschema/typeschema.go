// Package typeschema knows the config schemas of component types without
// running a plugin, for the two places that check app configs before any
// agent sees them: imsd (PushAppRevision) and the byoc CLI (byoc app
// validate, byoc app push).
//
// It holds the built-in types' schemas (the action type's, from
// plugins/action/actionschema, the image type's, from
// plugins/image/imageschema, the terraform type's, from
// plugins/terraform/tfschema, and the helm type's, from
// plugins/helm/helmschema), reads the description a third-party plugin
// prints with "byoc-plugin-<type> describe", and turns schemas into the
// checks schema/app/validate runs (validate.Options.Types).
//
// A config string holding a {{ }} reference is rendered per install at
// deploy time, so it cannot be type-checked before: such a value passes
// every check its rendered value decides (type, enum, const, length,
// pattern, bounds; see configschema.Options.Deferred). A reference where
// the schema forbids the field, or a required field left out, is still
// an error; the plugin checks the rendered config again before it runs.
//
// It imports no gRPC or go-plugin code, and nothing of imsd, agentd or
// the CLI.
package typeschema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/byoc-dev/byoc/plugins/action/actionschema"
	"github.com/byoc-dev/byoc/plugins/helm/helmschema"
	"github.com/byoc-dev/byoc/plugins/image/imageschema"
	"github.com/byoc-dev/byoc/plugins/sdk/configschema"
	"github.com/byoc-dev/byoc/plugins/sdk/jobconfig"
	"github.com/byoc-dev/byoc/plugins/terraform/tfschema"
	"github.com/byoc-dev/byoc/schema/app/template"
	"github.com/byoc-dev/byoc/schema/app/validate"
)

// builtin maps each built-in type to its config schema; "" means the
// type's plugin does not exist yet and any config is accepted.
var builtin = map[string]string{
	"action":    actionschema.Config,
	"image":     imageschema.Config,
	"helm":      helmschema.Config,
	"terraform": tfschema.Config,
}

// BuiltinNames returns the built-in component types, sorted.
func BuiltinNames() []string { return slices.Sorted(maps.Keys(builtin)) }

// IsBuiltin reports whether typ is a built-in component type.
func IsBuiltin(typ string) bool {
	_, ok := builtin[typ]
	return ok
}

// BuiltinSchema returns the config schema of built-in type typ: "" when the
// type has none yet, false when typ is not built in.
func BuiltinSchema(typ string) (string, bool) {
	s, ok := builtin[typ]
	return s, ok
}

// Check returns the validator's check of a config against s; nil s accepts
// any config (and so does the nil check it returns).
func Check(s *configschema.Schema) validate.ConfigCheck {
	if s == nil {
		return nil
	}
	return func(config map[string]any) []validate.FieldProblem {
		if config == nil {
			config = map[string]any{}
		}
		var out []validate.FieldProblem
		for _, d := range s.ValidateWith(config, configschema.Options{Deferred: template.HasRefs}) {
			out = append(out, validate.FieldProblem{Field: d.Field, Message: d.Message, Hint: d.Hint, Warning: d.IsWarning()})
		}
		return out
	}
}

// Types returns validate.Options.Types for the built-in types and the
// registered ones (by type; a nil schema accepts any config). A
// registered type never replaces a built-in one.
func Types(registered map[string]*configschema.Schema) map[string]validate.ConfigCheck {
	out := make(map[string]validate.ConfigCheck, len(builtin)+len(registered))
	for t, s := range registered {
		out[t] = Check(s)
	}
	for t, src := range builtin {
		out[t] = nil
		if src != "" {
			// The built-in schemas are constants, compiled by this
			// package's tests: an error here is a programming error.
			s, err := configschema.Compile(src)
			if err != nil {
				panic(fmt.Sprintf("typeschema: built-in type %s: %v", t, err))
			}
			out[t] = Check(s)
		}
	}
	return out
}

// TypeName is the form of a component type's name: what follows
// "byoc-plugin-" in its binary's name.
var TypeName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// Description is what "byoc-plugin-<type> describe" prints (see
// sdk.PrintDescription): the type, its version and protocol, and its
// schemas as JSON objects.
type Description struct {
	Type             string          `json:"type"`
	Version          string          `json:"version"`
	Protocol         string          `json:"protocol"`
	ProtocolVersions []string        `json:"protocol_versions,omitempty"`
	Capabilities     []string        `json:"capabilities,omitempty"`
	ConfigSchema     json.RawMessage `json:"config_schema,omitempty"`
	OutputsSchema    json.RawMessage `json:"outputs_schema,omitempty"`
}

var protocolRE = regexp.MustCompile(`^[0-9]{1,4}\.[0-9]{1,4}$`)

// AgentProtocolMajors are the plugin protocol major versions the agents
// of this byoc build speak: sdk.ProtocolMajor (a test keeps them in step;
// this package links no SDK code).
var AgentProtocolMajors = []int{1}

// CheckProtocol refuses a description no agent could run: one whose
// protocol, and every one of its protocol_versions, is of a major version
// the agents do not speak. Registering it would only fail every job of
// the type at the plugin's start.
func CheckProtocol(d Description) error {
	var versions []string
	for _, v := range append([]string{d.Protocol}, d.ProtocolVersions...) {
		if !slices.Contains(versions, v) {
			versions = append(versions, v)
		}
	}
	for _, v := range versions {
		major, _, _ := strings.Cut(v, ".")
		n, err := strconv.Atoi(major)
		if err == nil && slices.Contains(AgentProtocolMajors, n) {
			return nil
		}
	}
	want := make([]string, len(AgentProtocolMajors))
	for i, m := range AgentProtocolMajors {
		want[i] = fmt.Sprintf("%d.x", m)
	}
	return fmt.Errorf("protocol: the plugin speaks byoc plugin protocol %s, but agents speak %s: no agent could run it; "+
		"build the plugin against a byoc SDK of protocol %s", strings.Join(versions, ", "), strings.Join(want, ", "), strings.Join(want, " or "))
}

// maxDescriptionBytes caps a description; schemas are small.
const maxDescriptionBytes = 256 << 10

// ParseDescription reads and checks the output of describe. It returns
// the description with its schemas compacted and the compiled config
// schema (nil when the type declares none). An error names the field, and
// for a schema the JSON path inside it. Fields it does not know are
// ignored, so a newer SDK's description still registers.
func ParseDescription(b []byte) (Description, *configschema.Schema, error) {
	var d Description
	if len(b) > maxDescriptionBytes {
		return d, nil, fmt.Errorf("description is %d bytes; at most %d are allowed", len(b), maxDescriptionBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		return d, nil, fmt.Errorf("description is not the JSON that byoc-plugin-TYPE describe prints: %w", err)
	}
	if dec.More() {
		return d, nil, fmt.Errorf("description holds more than one JSON value")
	}
	switch {
	case d.Type == "":
		return d, nil, fmt.Errorf("type: is required")
	case !TypeName.MatchString(d.Type):
		return d, nil, fmt.Errorf("type: %q is not a valid type name: use lowercase letters, digits, _ and -, starting with a letter", d.Type)
	case d.Version == "":
		return d, nil, fmt.Errorf("version: is required")
	case len(d.Version) > 64 || strings.ContainsFunc(d.Version, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return d, nil, fmt.Errorf("version: %q is not a version", d.Version)
	case !protocolRE.MatchString(d.Protocol):
		return d, nil, fmt.Errorf("protocol: %q is not a protocol version such as \"1.1\"", d.Protocol)
	}
	var sch *configschema.Schema
	for _, s := range []struct {
		name string
		raw  *json.RawMessage
	}{{"config_schema", &d.ConfigSchema}, {"outputs_schema", &d.OutputsSchema}} {
		if len(*s.raw) == 0 || string(*s.raw) == "null" {
			*s.raw = nil
			continue
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, *s.raw); err != nil {
			return d, nil, fmt.Errorf("%s: %w", s.name, err)
		}
		*s.raw = buf.Bytes()
		compiled, err := configschema.Compile(buf.String())
		if err != nil {
			return d, nil, fmt.Errorf("%s: %w", s.name, err)
		}
		if s.name == "config_schema" {
			if err := jobconfig.CheckSchema(buf.String()); err != nil {
				return d, nil, fmt.Errorf("%s: %w", s.name, err)
			}
			sch = compiled
		}
	}
	return d, sch, nil
}
