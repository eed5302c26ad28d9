// Package validate checks what an app config's values mean, across its
// files: names and their uniqueness, references to inputs, secrets and
// component outputs, dependency cycles, component types and their configs
// (through the ConfigCheck of each type the caller knows), cron schedules,
// script and policy files, timeouts and install values. Every problem is
// reported, with the file, line and key it is about.
package validate

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/internal/labels"
	"github.com/byoc-dev/byoc/internal/window"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	"github.com/byoc-dev/byoc/schema/app/config"
	"github.com/byoc-dev/byoc/schema/app/cron"
	"github.com/byoc-dev/byoc/schema/app/diag"
	"github.com/byoc-dev/byoc/schema/app/template"
	"sigs.k8s.io/yaml"
)

// Options says what the validator knows beyond the files.
type Options struct {
	// Types are the component types installs can run, with a check of
	// each type's config (nil: any config). Nil Types means BuiltinTypes.
	Types map[string]ConfigCheck
	// AnyType accepts a type not in Types, without checking its config:
	// for a check before the one that knows every type (byoc app push
	// checks what it can, imsd the rest), and for reading again revisions
	// that were valid when they were stored.
	AnyType bool
	// Stored reads again a revision that was valid when it was stored:
	// checks added since (the limits on a job config's shape and on an
	// input's value) are left out, so that it still parses.
	Stored bool
	// TypeHint ends the hint of the error naming a type not in Types,
	// saying how to make one known (register it, pass its schema).
	TypeHint string
}

// ConfigCheck checks a component's config against its type's schema and
// returns one problem per bad field. A config string holding a {{ }}
// reference (template.HasRefs) is rendered only at deploy time: a check must not
// fault it for what its rendered value decides (type, enum, pattern, ...).
type ConfigCheck func(config map[string]any) []FieldProblem

// A FieldProblem is one bad field of a component config.
type FieldProblem struct {
	// Field is the path inside config, such as "steps[0].script"; empty
	// for the config as a whole.
	Field   string
	Message string
	// Hint says what would be right, if known.
	Hint string
	// Warning marks what is worth saying but lets the config through
	// (a field the type's schema marks deprecated).
	Warning bool
}

// BuiltinTypes are the component types every agent has, without checks of
// their config: the callers that know the types' schemas (imsd, the CLI,
// through plugins/typeschema) pass their own Options.Types.
func BuiltinTypes() map[string]ConfigCheck {
	return map[string]ConfigCheck{"image": nil, "helm": nil, "terraform": nil, "action": nil}
}

var (
	identRE   = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)
	appNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

const identHint = "use lowercase letters, digits and _, starting with a letter"

// maxTimeout caps component and action timeouts.
const maxTimeout = 24 * time.Hour

// Check adds to ds every problem it finds in a, which config.Decode read.
func Check(a *config.App, ds *diag.List, opts Options) {
	types := opts.Types
	if types == nil {
		types = BuiltinTypes()
	}
	v := &validator{a: a, ds: ds, types: types, anyType: opts.AnyType, typeHint: opts.TypeHint, stored: opts.Stored}
	for _, c := range a.Components {
		v.components = append(v.components, c.Name)
	}
	for _, in := range a.Inputs.Inputs {
		v.inputs = append(v.inputs, in.Name)
	}
	for _, s := range a.Secrets.Secrets {
		v.secrets = append(v.secrets, s.Name)
	}
	v.metadata()
	v.checkInputs()
	v.checkSecrets()
	if a.Sandbox != nil {
		v.component("sandbox.toml", a.Sandbox)
	}
	// components/*.toml files are validated by their own file, so a
	// component named "sandbox" there is told it cannot be.
	for _, c := range a.Components {
		v.component(a.Source(c), c)
	}
	v.cycles()
	for _, ac := range a.Actions {
		v.action(a.Source(ac), ac)
	}
	for _, d := range a.DebugCommands {
		v.debug(a.Source(d), d)
	}
	v.clouds()
	v.permissions()
	v.policies()
	v.clusterPolicies()
	v.breakGlass()
	v.telemetry()
	for _, in := range a.Installs {
		v.install(a.Source(in), in)
	}
}

type validator struct {
	a     *config.App
	ds    *diag.List
	types map[string]ConfigCheck
	// anyType, typeHint and stored are Options.AnyType, Options.TypeHint
	// and Options.Stored.
	anyType  bool
	typeHint string
	stored   bool
	// The names declared, for "no such" errors and their suggestions.
	components, inputs, secrets []string
}

// noComponent reports a reference to a component the app does not have,
// suggesting the closest name or listing them.
func (v *validator) noComponent(file, key, prefix, name string, names []string) {
	v.errf(file, key, cmp.Or(diag.DidYouMean(name, names), "components are "+diag.QuoteList(names)), "%sno component named %q", prefix, name)
}

func (v *validator) errf(file, key, hint, format string, args ...any) {
	v.ds.Addf(file, v.a.Line(file, key), key, hint, format, args...)
}

func (v *validator) metadata() {
	m := v.a.Metadata
	if m.Name != "" && !appNameRE.MatchString(m.Name) {
		v.errf("app.toml", "name", "use lowercase letters, digits and -, starting with a letter", "%q is not a valid app name", m.Name)
	}
	if p := m.InstallDefaults.Parallelism; p < 0 || p > 64 {
		v.errf("app.toml", "install_defaults.parallelism", "", "must be between 1 and 64, got %d", p)
	}
	v.inputValues("app.toml", "install_defaults.inputs", m.InstallDefaults.Inputs, false)
}

func (v *validator) checkInputs() {
	const f = "inputs.toml"
	groups := map[string]bool{}
	for i, g := range v.a.Inputs.Groups {
		key := fmt.Sprintf("group[%d].name", i)
		if g.Name != "" && groups[g.Name] {
			v.errf(f, key, "", "group %q is defined twice", g.Name)
		}
		groups[g.Name] = true
	}
	seen := map[string]bool{}
	for i, in := range v.a.Inputs.Inputs {
		at := func(k string) string { return fmt.Sprintf("input[%d].%s", i, k) }
		switch {
		case in.Name == "":
		case !identRE.MatchString(in.Name):
			v.errf(f, at("name"), identHint, "%q is not a valid input name", in.Name)
		case seen[in.Name]:
			v.errf(f, at("name"), "names must be unique", "input %q is defined twice", in.Name)
		}
		seen[in.Name] = true
		if in.Group != "" && !groups[in.Group] {
			v.errf(f, at("group"), cmp.Or(diag.DidYouMean(in.Group, sortedKeys(groups)), "declare it with [[group]] name = \""+in.Group+"\""), "no group named %q", in.Group)
		}
		typ := cmp.Or(in.Type, "string")
		if len(in.Values) > 0 && typ != "enum" {
			v.errf(f, at("values"), "set type = \"enum\", or remove values", "values only apply to enum inputs, and this one is %s", typ)
		}
		if typ == "enum" {
			if len(in.Values) == 0 {
				v.errf(f, at("type"), "list the allowed values: values = [\"a\", \"b\"]", "an enum input needs values")
			}
			for j, val := range in.Values {
				if slices.Index(in.Values, val) != j {
					v.errf(f, fmt.Sprintf("input[%d].values[%d]", i, j), "", "%q is listed twice", val)
				}
			}
		}
		if in.Pattern != "" {
			if typ != "string" {
				v.errf(f, at("pattern"), "", "pattern only applies to string inputs, and this one is %s", typ)
			} else if _, err := regexp.Compile(in.Pattern); err != nil {
				v.errf(f, at("pattern"), "patterns use RE2 syntax", "is not a valid regular expression: %v", strings.TrimPrefix(err.Error(), "error parsing regexp: "))
			}
		}
		if (in.Min != nil || in.Max != nil) && typ != "number" {
			v.errf(f, at("min"), "", "min and max only apply to number inputs, and this one is %s", typ)
		}
		if in.Min != nil && in.Max != nil && *in.Min > *in.Max {
			v.errf(f, at("min"), "", "min %v is greater than max %v", *in.Min, *in.Max)
		}
		if in.Default != nil {
			switch {
			case in.Required:
				v.errf(f, at("default"), "remove required, or remove the default", "a required input cannot have a default")
			case in.Sensitive:
				v.errf(f, at("default"), "let each install provide it", "a sensitive input cannot have a default: it would be stored in every revision")
			default:
				v.inputSize(f, at("default"), in.Name, in.Default)
				if msg := in.CheckValue(in.Default); msg != "" {
					v.errf(f, at("default"), "", "%s", msg)
				}
			}
		}
	}
}

// inputValues checks values given for inputs by name (install defaults or
// an install file). When complete, vendor inputs that are required must be
// there.
func (v *validator) inputValues(file, key string, vals map[string]any, complete bool) {
	byName := map[string]config.Input{}
	for _, in := range v.a.Inputs.Inputs {
		byName[in.Name] = in
	}
	names := v.inputs
	for _, name := range sortedKeys(vals) {
		k := diag.Join(key, name)
		in, ok := byName[name]
		if !ok {
			v.errf(file, k, cmp.Or(diag.DidYouMean(name, names), "declare it in inputs.toml"), "no input named %q", name)
			continue
		}
		if in.ProvidedBy == "customer" {
			v.errf(file, k, "remove it here; the customer sets it in the install stack", "input %q is provided by the customer", name)
			continue
		}
		if msg := in.CheckValue(vals[name]); msg != "" {
			v.errf(file, k, "", "%s", msg)
		}
		v.inputSize(file, k, name, vals[name])
	}
	if !complete {
		return
	}
	// Without an [inputs] table, the file as a whole is at fault: line 1,
	// where the decoder reports a missing required key too.
	line := max(v.a.Line(file, key), 1)
	for _, in := range v.a.Inputs.Inputs {
		if _, ok := vals[in.Name]; !ok && in.Required && in.ProvidedBy != "customer" && v.a.Metadata.InstallDefaults.Inputs[in.Name] == nil {
			v.ds.Addf(file, line, key, fmt.Sprintf("add %s = ... under [inputs]", in.Name), "required input %q is not set", in.Name)
		}
	}
}

func (v *validator) checkSecrets() {
	seen := map[string]bool{}
	for i, s := range v.a.Secrets.Secrets {
		key := fmt.Sprintf("secret[%d].name", i)
		switch {
		case s.Name == "":
		case !identRE.MatchString(s.Name):
			v.errf("secrets.toml", key, identHint, "%q is not a valid secret name", s.Name)
		case seen[s.Name]:
			v.errf("secrets.toml", key, "names must be unique", "secret %q is defined twice", s.Name)
		}
		seen[s.Name] = true
	}
}

func (v *validator) component(file string, c *config.Component) {
	if file != "sandbox.toml" {
		switch {
		case c.Name == "sandbox":
			v.errf(file, "name", "the sandbox is configured in sandbox.toml; choose another name", "\"sandbox\" is reserved")
		case c.Name == config.ClusterPoliciesName:
			v.errf(file, "name", "cluster policies are configured in policies.toml ([[cluster_policy]]); choose another name", "%q is reserved", c.Name)
		case !identRE.MatchString(c.Name):
			v.errf(file, "name", identHint+"; without name, the file name is used", "%q is not a valid component name", c.Name)
		}
	}
	if c.Type != "" {
		if check, ok := v.types[c.Type]; !ok && !v.anyType {
			v.errf(file, "type", v.unknownTypeHint(c.Type), "no component type %q", c.Type)
		} else if check != nil {
			v.configProblems(file, "config", check(c.Config))
		}
	}
	if c.Timeout < 0 || time.Duration(c.Timeout) > maxTimeout {
		v.errf(file, "timeout", "", "must be between 0 and 24h, got %s", c.Timeout)
	}
	if c.DriftSchedule != "" {
		if _, err := cron.Parse(c.DriftSchedule); err != nil {
			v.errf(file, "drift_schedule", "", "%q is not a cron schedule: %v", c.DriftSchedule, err)
		}
	}
	names := v.components
	for i, d := range c.Dependencies {
		key := fmt.Sprintf("dependencies[%d]", i)
		switch {
		case d == c.Name:
			v.errf(file, key, "remove it", "%q depends on itself", d)
		case d == "sandbox":
			v.errf(file, key, "remove it: every component waits for the sandbox", "the sandbox is always deployed first")
		case !slices.Contains(names, d):
			v.noComponent(file, key, "", d, names)
		case slices.Index(c.Dependencies, d) != i:
			v.errf(file, key, "", "%q is listed twice", d)
		}
	}
	v.configLimits(file, "config", c.Config)
	template.EachString("config", c.Config, func(key, s string) {
		v.refs(file, key, s, c.Name)
	})
}

// inputSize reports an input value longer than config.MaxInputValueBytes
// (as the API refuses one for an install).
func (v *validator) inputSize(file, key, name string, val any) {
	if s, ok := val.(string); ok && len(s) > config.MaxInputValueBytes && !v.stored {
		v.errf(file, key, "", "the value of input %q is %d bytes; at most %d are allowed", name, len(s), config.MaxInputValueBytes)
	}
}

// configLimits reports a config (a component's, or an install's override
// of one) that breaks a limit every agent enforces on a job's config
// (agentproto.CheckConfig), at the line of the value when it can be
// told, else of the config.
func (v *validator) configLimits(file, key string, cfg map[string]any) {
	var ce *agentproto.ConfigError
	if v.stored || !errors.As(agentproto.CheckConfig(cfg), &ce) {
		return
	}
	at := key + ce.Path
	line := v.a.Line(file, at)
	if line == 0 {
		line = v.a.Line(file, key)
	}
	if line == 0 {
		line = v.a.Line(file, "type")
	}
	v.ds.Addf(file, line, at, "every agent refuses a job whose config breaks this limit", "%s", ce.Problem)
}

// unknownTypeHint says what the known types are, which is closest to typ,
// and how to make another one known.
func (v *validator) unknownTypeHint(typ string) string {
	known := sortedKeys(v.types)
	hint := "known types: " + strings.Join(known, ", ")
	if h := diag.DidYouMean(typ, known); h != "" {
		hint = h + " " + hint
	}
	if v.typeHint != "" {
		hint += "; " + v.typeHint
	}
	return hint
}

// configProblems reports what a type's check found in a component's
// config, at the line of each field, or of the closest key written (a
// missing field is reported at its table, a missing config at the type).
//
// An unknown field close to a known one says which it may mean, and then
// the known field's "is required", the same typo's other half, is left
// out.
func (v *validator) configProblems(file, prefix string, ps []FieldProblem) {
	meant := map[string]bool{}
	for i, p := range ps {
		known, ok := strings.CutPrefix(p.Hint, knownFieldsHint)
		if p.Message != "unknown field" || !ok {
			continue
		}
		parent, name := splitField(p.Field)
		if hint := diag.DidYouMean(name, strings.Split(known, ", ")); hint != "" {
			ps[i].Hint = hint
			_, want, _ := strings.Cut(hint, `"`)
			meant[joinField(parent, strings.TrimSuffix(want, `"?`))] = true
		}
	}
	for _, p := range ps {
		if p.Message == "is required" && meant[p.Field] {
			continue
		}
		key := prefix
		switch {
		case strings.HasPrefix(p.Field, "["):
			key += p.Field
		case p.Field != "":
			key += "." + p.Field
		}
		line := v.a.Line(file, key)
		if line == 0 {
			line = v.a.Line(file, "type")
		}
		d := diag.Diagnostic{File: file, Line: line, Key: key, Message: p.Message, Hint: p.Hint}
		if p.Warning {
			d.Severity = diag.SeverityWarning
		}
		v.ds.Add(d)
	}
}

// knownFieldsHint starts the hint of configschema's "unknown field".
const knownFieldsHint = "known fields: "

// splitField splits a config field path into its parent and its last
// name: "values.replica" is "values" and "replica".
func splitField(f string) (parent, name string) {
	i := strings.LastIndexAny(f, ".]")
	if i < 0 {
		return "", f
	}
	if f[i] == ']' {
		return f, ""
	}
	return f[:i], f[i+1:]
}

// joinField is splitField's inverse.
func joinField(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// refs checks the references in one config string of component self ("" for
// actions).
func (v *validator) refs(file, key, s, self string) {
	refs, rerr := template.Refs(s)
	if rerr != nil {
		v.errf(file, key, rerr.Hint, "%s", rerr.Message)
		return
	}
	for _, r := range refs {
		switch r.Root {
		case "inputs":
			if !slices.Contains(v.inputs, r.Name) {
				v.errf(file, key, cmp.Or(diag.DidYouMean(r.Name, v.inputs), "declare it in inputs.toml"), "{{ %s }}: no input named %q", r, r.Name)
			} else if v.mayBeUnset(r.Name) {
				v.errf(file, key, "give it a default in inputs.toml, make it required, or set it in app.toml's [install_defaults] inputs",
					"{{ %s }}: input %q is optional and has no default, so an install that does not set it cannot render this", r, r.Name)
			}
		case "secrets":
			if !slices.Contains(v.secrets, r.Name) {
				v.errf(file, key, cmp.Or(diag.DidYouMean(r.Name, v.secrets), "declare it in secrets.toml"), "{{ %s }}: no secret named %q", r, r.Name)
			}
		case "sandbox":
			if v.a.Sandbox == nil {
				v.errf(file, key, "add sandbox.toml, or remove the reference", "{{ %s }}: this app has no sandbox", r)
			} else if self == "sandbox" {
				v.errf(file, key, "", "{{ %s }}: the sandbox cannot use its own outputs", r)
			}
		case "components":
			switch {
			case r.Name == self:
				v.errf(file, key, "", "{{ %s }}: a component cannot use its own outputs", r)
			case self == "sandbox":
				v.errf(file, key, "the sandbox is deployed before every component", "{{ %s }}: the sandbox cannot use component outputs", r)
			case !slices.Contains(v.components, r.Name):
				v.noComponent(file, key, fmt.Sprintf("{{ %s }}: ", r), r.Name, v.components)
			}
		}
	}
}

// mayBeUnset reports whether an install may have no value for input name:
// it is optional, with no default in inputs.toml or app.toml.
func (v *validator) mayBeUnset(name string) bool {
	for _, in := range v.a.Inputs.Inputs {
		if in.Name == name {
			_, appDefault := v.a.Metadata.InstallDefaults.Inputs[name]
			return !in.Required && in.Default == nil && !appDefault
		}
	}
	return false
}

func (v *validator) cycles() {
	for _, cyc := range v.a.Graph().Cycles() {
		first := cyc[0]
		file := v.a.FileOf("component", first)
		v.errf(file, v.edge(first, cyc[1]), "a component cannot wait for itself; remove one of these dependencies or output references",
			"dependency cycle: %s", strings.Join(cyc, " → "))
	}
}

// edge returns the key that makes component from wait for component to:
// dependencies when it lists to, else the first config string that refers
// to to's outputs.
func (v *validator) edge(from, to string) string {
	c := v.a.Component(from)
	if c == nil || slices.Contains(c.Dependencies, to) {
		return "dependencies"
	}
	key := "dependencies"
	found := false
	template.EachString("config", c.Config, func(k, s string) {
		if found {
			return
		}
		refs, _ := template.Refs(s)
		if slices.ContainsFunc(refs, func(r template.Ref) bool { return r.Root == "components" && r.Name == to }) {
			key, found = k, true
		}
	})
	return key
}

var hookTypes = []string{"pre_deploy", "post_deploy", "pre_teardown", "post_teardown"}

func (v *validator) action(file string, ac *config.Action) {
	if !identRE.MatchString(ac.Name) {
		v.errf(file, "name", identHint+"; without name, the file name is used", "%q is not a valid action name", ac.Name)
	}
	if ac.Timeout < 0 || time.Duration(ac.Timeout) > maxTimeout {
		v.errf(file, "timeout", "", "must be between 0 and 24h, got %s", ac.Timeout)
	}
	steps := map[string]bool{}
	for i, st := range ac.Steps {
		at := func(k string) string { return fmt.Sprintf("step[%d].%s", i, k) }
		if st.Name != "" && steps[st.Name] {
			v.errf(file, at("name"), "step names must be unique within an action", "step %q is defined twice", st.Name)
		}
		steps[st.Name] = true
		switch {
		case st.Script == "" && st.File == "":
			v.errf(file, fmt.Sprintf("step[%d]", i), "add script = \"...\" or file = \"scripts/x.sh\"", "step %q has no script", st.Name)
		case st.Script != "" && st.File != "":
			v.errf(file, at("file"), "keep one of them", "step %q sets both script and file", st.Name)
		case st.File != "":
			v.appFile(file, at("file"), st.File)
		}
		v.env(file, fmt.Sprintf("step[%d].env", i), st.Env)
	}
	v.env(file, "env", ac.Env)
	hasCron := false
	for i, t := range ac.Triggers {
		at := func(k string) string { return fmt.Sprintf("trigger[%d].%s", i, k) }
		switch {
		case t.Type == "cron":
			hasCron = true
			if t.Schedule == "" {
				v.errf(file, at("type"), "add schedule = \"*/15 * * * *\"", "a cron trigger needs a schedule")
			} else if _, err := cron.Parse(t.Schedule); err != nil {
				v.errf(file, at("schedule"), "", "%q is not a cron schedule: %v", t.Schedule, err)
			}
		case t.Schedule != "":
			v.errf(file, at("schedule"), "set type = \"cron\", or remove schedule", "only cron triggers have a schedule")
		}
		if t.Component != "" {
			switch {
			case !slices.Contains(hookTypes, t.Type):
				v.errf(file, at("component"), "component applies to "+strings.Join(hookTypes, ", "), "a %s trigger does not take a component", t.Type)
			case !slices.Contains(v.components, t.Component):
				v.noComponent(file, at("component"), "", t.Component, v.components)
			}
		}
		for j := range i {
			if ac.Triggers[j] == t {
				v.errf(file, fmt.Sprintf("trigger[%d]", i), "remove one", "the same trigger as trigger[%d]", j)
				break
			}
		}
	}
	if ac.HealthCheck && !hasCron {
		v.errf(file, "health_check", "add [[trigger]] type = \"cron\" schedule = \"*/5 * * * *\"", "a health check needs a cron trigger to run on")
	}
}

// maxDebugTimeout caps a debug command's timeout: it reads, it does not
// migrate.
const maxDebugTimeout = time.Hour

// debugReserved are the flags of byoc debug itself, which a debug
// command's arguments cannot be named (--NAME would be byoc's).
var debugReserved = []string{"context", "help", "output", "reason", "server", "token"}

func (v *validator) debug(file string, d *config.DebugCommand) {
	if !identRE.MatchString(d.Name) {
		v.errf(file, "name", identHint+"; without name, the file name is used", "%q is not a valid debug command name", d.Name)
	}
	if d.Timeout < 0 || time.Duration(d.Timeout) > maxDebugTimeout {
		v.errf(file, "timeout", "", "must be between 0 and 1h, got %s", d.Timeout)
	}
	if d.Script != "" && strings.TrimSpace(d.Script) == "" {
		v.errf(file, "script", "add script = \"...\", reading its arguments as $ARG_NAME", "a debug command needs a script")
	}
	comps := v.a.DebugComponents()
	seen := map[string]bool{}
	for i, a := range d.Args {
		at := func(k string) string { return fmt.Sprintf("arg[%d].%s", i, k) }
		if !identRE.MatchString(a.Name) {
			v.errf(file, at("name"), identHint, "%q is not a valid argument name", a.Name)
		} else if slices.Contains(debugReserved, a.Name) {
			v.errf(file, at("name"), "choose another name", "%q is a flag of byoc debug itself (%s are)", a.Name, strings.Join(debugReserved, ", "))
		} else if seen[a.Name] {
			v.errf(file, at("name"), "argument names must be unique within a debug command", "argument %q is defined twice", a.Name)
		}
		seen[a.Name] = true
		typ := cmp.Or(a.Type, "string")
		if a.Pattern != "" {
			if typ != "string" {
				v.errf(file, at("pattern"), "remove it, or set type = \"string\"", "only a string argument has a pattern")
			} else if _, err := regexp.Compile(a.Pattern); err != nil {
				v.errf(file, at("pattern"), "", "%q is not a regular expression: %v", a.Pattern, err)
			}
		}
		if (a.Min != nil || a.Max != nil) && typ != "int" {
			key := "max"
			if a.Min != nil {
				key = "min"
			}
			v.errf(file, at(key), "remove it, or set type = \"int\"", "only an int argument has bounds")
		}
		if a.Min != nil && a.Max != nil && *a.Min > *a.Max {
			v.errf(file, at("min"), "", "min %d is more than max %d", *a.Min, *a.Max)
		}
		switch {
		case typ == "enum" && len(a.Values) == 0:
			v.errf(file, at("type"), "add values = [\"a\", \"b\"]", "an enum argument needs values")
		case typ != "enum" && len(a.Values) > 0:
			v.errf(file, at("values"), "remove them, or set type = \"enum\"", "only an enum argument has values")
		}
		if a.Sensitive && a.Default != "" {
			v.errf(file, at("default"), "remove it: a secret is given at each run, never kept in the app config", "a sensitive argument has no default")
		}
		if a.Required && a.Default != "" {
			v.errf(file, at("default"), "keep one of them", "a required argument has no default")
		} else if a.Default != "" {
			if err := a.Check(a.Default, comps); err != nil {
				v.errf(file, at("default"), "", "the default %v", err)
			}
		}
	}
}

func (v *validator) env(file, key string, env map[string]string) {
	for _, k := range sortedKeys(env) {
		switch {
		case !envNameRE.MatchString(k):
			v.errf(file, diag.Join(key, k), "use letters, digits and _, not starting with a digit", "%q is not a valid environment variable name", k)
		case strings.HasPrefix(k, "BYOC_"):
			v.errf(file, diag.Join(key, k), "choose another name", "BYOC_ variables are set by the agent")
		}
		v.refs(file, diag.Join(key, k), env[k], "")
	}
}

// appFile checks that p names a file of the app directory.
func (v *validator) appFile(file, key, p string) {
	clean := path.Clean(p)
	if path.IsAbs(p) || clean == ".." || strings.HasPrefix(clean, "../") {
		v.errf(file, key, "paths are relative to the app directory, such as \"scripts/migrate.sh\"", "%q is outside the app directory", p)
		return
	}
	if _, ok := v.a.Files[clean]; !ok {
		v.errf(file, key, "paths are relative to the app directory", "%q does not exist", p)
	}
}

// clouds checks app.toml's clouds.
func (v *validator) clouds() {
	seen := map[string]bool{}
	for i, c := range v.a.Metadata.Clouds {
		key := fmt.Sprintf("clouds[%d]", i)
		switch {
		case !slices.Contains(config.Clouds, c):
			v.errf("app.toml", key, "", "%q is not a cloud byoc installs on (known: %s)", c, strings.Join(config.Clouds, ", "))
		case seen[c]:
			v.errf("app.toml", key, "", "%q is listed twice", c)
		}
		seen[c] = true
	}
}

// cloudsText is how messages name app.toml's clouds.
func (v *validator) cloudsText() string {
	if len(v.a.Metadata.Clouds) == 0 {
		return "app.toml lists no clouds, which means aws only"
	}
	return fmt.Sprintf("app.toml clouds = [%s]", strings.Join(v.a.Metadata.Clouds, ", "))
}

func (v *validator) permissions() {
	p := v.a.Permissions
	for _, m := range []struct {
		key string
		r   *config.ModeRole
	}{{"provision", p.Provision}, {"maintenance", p.Maintenance}, {"deprovision", p.Deprovision}, {"break_glass", p.BreakGlass}} {
		if m.r == nil {
			continue
		}
		const f = "permissions.toml"
		aws := v.a.Metadata.Supports(config.CloudAWS)
		for i, pol := range m.r.Policies {
			key := fmt.Sprintf("%s.policies[%d]", m.key, i)
			if _, azure := config.AzureRoleID(pol); azure {
				v.errf(f, key, "an Azure role goes in "+m.key+".azure_roles", "%q is an Azure role written as an AWS policy", pol)
			} else if config.IsGCPRole(pol) {
				v.errf(f, key, "a Google Cloud role goes in "+m.key+".gcp_roles", "%q is a Google Cloud role written as an AWS policy", pol)
			} else if !aws {
				v.errf(f, key, "add aws to app.toml clouds, or remove it", "an AWS policy, but the app does not install on aws (%s)", v.cloudsText())
			}
		}
		if !aws && m.r.PermissionsBoundary != "" {
			v.errf(f, m.key+".permissions_boundary", "add aws to app.toml clouds, or remove it", "an AWS permissions boundary, but the app does not install on aws (%s)", v.cloudsText())
		}
		if !aws && len(m.r.Statements) > 0 {
			v.errf(f, m.key+".statements", "add aws to app.toml clouds, or remove them", "AWS IAM statements, but the app does not install on aws (%s)", v.cloudsText())
		}
		for i, r := range m.r.AzureRoles {
			key := fmt.Sprintf("%s.azure_roles[%d]", m.key, i)
			_, ok := config.AzureRoleID(r)
			switch {
			case strings.HasPrefix(r, "arn:"):
				v.errf(f, key, "an AWS policy goes in "+m.key+".policies", "%q is an AWS ARN written as an Azure role", r)
			case config.IsGCPRole(r):
				v.errf(f, key, "a Google Cloud role goes in "+m.key+".gcp_roles", "%q is a Google Cloud role written as an Azure role", r)
			case !ok:
				v.errf(f, key, "or give the role definition's GUID", "%q is not an Azure built-in role byoc knows (%s)", r, strings.Join(config.AzureRoleNames(), ", "))
			case !v.a.Metadata.Supports(config.CloudAzure):
				v.errf(f, key, "add azure to app.toml clouds, or remove it", "an Azure role, but the app does not install on azure (%s)", v.cloudsText())
			}
		}
		for i, r := range m.r.GCPRoles {
			key := fmt.Sprintf("%s.gcp_roles[%d]", m.key, i)
			_, azure := config.AzureRoleID(r)
			switch {
			case strings.HasPrefix(r, "arn:"):
				v.errf(f, key, "an AWS policy goes in "+m.key+".policies", "%q is an AWS ARN written as a Google Cloud role", r)
			case azure:
				v.errf(f, key, "an Azure role goes in "+m.key+".azure_roles", "%q is an Azure role written as a Google Cloud role", r)
			case !config.IsGCPRole(r):
				v.errf(f, key, "a predefined role such as \"roles/compute.admin\", or a custom one, \"projects/PROJECT/roles/NAME\"", "%q is not a Google Cloud IAM role", r)
			case !v.a.Metadata.Supports(config.CloudGCP):
				v.errf(f, key, "add gcp to app.toml clouds, or remove it", "a Google Cloud role, but the app does not install on gcp (%s)", v.cloudsText())
			}
		}
		for i, s := range m.r.Statements {
			var doc map[string]any
			if err := json.Unmarshal([]byte(s), &doc); err != nil {
				v.errf("permissions.toml", fmt.Sprintf("%s.statements[%d]", m.key, i), "each statement is a JSON policy document", "is not a JSON object: %v", err)
			}
		}
	}
}

// regoPackageRE finds a rego module's package declaration. The module
// itself is compiled where it is evaluated, by the plugin on the agent
// (plugins/policy), which names the file and line of any error: neither
// imsd nor the CLI links OPA.
var regoPackageRE = regexp.MustCompile(`(?m)^\s*package\s+[A-Za-z_]`)

func (v *validator) policies() {
	const f = "policies.toml"
	seen := map[string]bool{}
	for i, p := range v.a.Policies.Policies {
		at := func(k string) string { return fmt.Sprintf("policy[%d].%s", i, k) }
		if p.Name != "" && seen[p.Name] {
			v.errf(f, at("name"), "names must be unique", "policy %q is defined twice", p.Name)
		}
		seen[p.Name] = true
		switch {
		case p.File == "" && p.Contents == "":
			v.errf(f, fmt.Sprintf("policy[%d]", i), "add file = \"policies/x.rego\" or contents = \"...\"", "policy %q has no source", p.Name)
		case p.File != "" && p.Contents != "":
			v.errf(f, at("file"), "keep one of them", "policy %q sets both file and contents", p.Name)
		case p.File != "":
			v.appFile(f, at("file"), p.File)
			if text, ok := v.a.Files[path.Clean(p.File)]; ok && p.Engine == "rego" && !regoPackageRE.Match(text) {
				v.errf(f, at("file"), "a rego module starts with a package line, such as \"package vendor.buckets\"", "%s has no package declaration", p.File)
			}
		case p.Engine == "rego" && !regoPackageRE.MatchString(p.Contents):
			v.errf(f, at("contents"), "a rego module starts with a package line, such as \"package vendor.buckets\"", "policy %q has no package declaration", p.Name)
		}
		if p.Engine == "cel" {
			v.errf(f, at("engine"), "write the policy in rego; agents evaluate rego only", "cel policies are not evaluated yet")
		}
		for j, t := range p.AppliesTo {
			if _, ok := v.types[t]; !ok && !v.anyType {
				v.errf(f, fmt.Sprintf("policy[%d].applies_to[%d]", i, j), v.unknownTypeHint(t), "no component type %q", t)
			}
		}
	}
}

// clusterPolicies checks policies.toml's [[cluster_policy]] entries:
// a source, and manifests of the kind each declares.
func (v *validator) clusterPolicies() {
	const f = "policies.toml"
	seen := map[string]bool{}
	for i, p := range v.a.Policies.ClusterPolicies {
		at := func(k string) string { return fmt.Sprintf("cluster_policy[%d].%s", i, k) }
		if p.Name != "" && seen[p.Name] {
			v.errf(f, at("name"), "names must be unique", "cluster policy %q is defined twice", p.Name)
		}
		seen[p.Name] = true
		var text, key string
		switch {
		case p.File == "" && p.Contents == "":
			v.errf(f, fmt.Sprintf("cluster_policy[%d]", i), "add file = \"policies/x.yaml\" or contents = \"...\"", "cluster policy %q has no manifests", p.Name)
			continue
		case p.File != "" && p.Contents != "":
			v.errf(f, at("file"), "keep one of them", "cluster policy %q sets both file and contents", p.Name)
			continue
		case p.File != "":
			v.appFile(f, at("file"), p.File)
			b, ok := v.a.Files[path.Clean(p.File)]
			if !ok {
				continue
			}
			text, key = string(b), at("file")
		default:
			text, key = p.Contents, at("contents")
		}
		for _, problem := range clusterPolicyProblems(p.Kind, text) {
			v.errf(f, key, clusterPolicyHint(p.Kind), "cluster policy %q: %s", p.Name, problem)
		}
	}
}

func clusterPolicyHint(kind string) string {
	if kind == "kyverno" {
		return "Kyverno policies are kyverno.io or policies.kyverno.io objects"
	}
	return "a validating_admission_policy is ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding objects of admissionregistration.k8s.io/v1"
}

// clusterPolicyProblems checks a cluster policy's manifests: YAML
// documents, each a Kubernetes object of the policy's kind.
func clusterPolicyProblems(kind, text string) []string {
	var problems []string
	n := 0
	for i, doc := range splitYAML(text) {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			problems = append(problems, fmt.Sprintf("document %d is not YAML: %v", i+1, err))
			continue
		}
		if len(obj) == 0 {
			continue
		}
		n++
		apiVersion, _ := obj["apiVersion"].(string)
		k, _ := obj["kind"].(string)
		meta, _ := obj["metadata"].(map[string]any)
		name, _ := meta["name"].(string)
		switch {
		case apiVersion == "" || k == "" || name == "":
			problems = append(problems, fmt.Sprintf("document %d is not a Kubernetes object (it needs apiVersion, kind and metadata.name)", i+1))
		case kind == "validating_admission_policy" && (apiVersion != "admissionregistration.k8s.io/v1" || (k != "ValidatingAdmissionPolicy" && k != "ValidatingAdmissionPolicyBinding")):
			problems = append(problems, fmt.Sprintf("document %d is a %s (%s), not a ValidatingAdmissionPolicy or ValidatingAdmissionPolicyBinding of admissionregistration.k8s.io/v1", i+1, k, apiVersion))
		case kind == "kyverno" && !strings.HasPrefix(apiVersion, "kyverno.io/") && !strings.HasPrefix(apiVersion, "policies.kyverno.io/"):
			problems = append(problems, fmt.Sprintf("document %d is a %s (%s), not a Kyverno policy", i+1, k, apiVersion))
		}
	}
	if n == 0 && len(problems) == 0 {
		problems = append(problems, "has no objects")
	}
	return problems
}

// splitYAML splits a YAML stream at its "---" lines.
func splitYAML(text string) []string {
	var docs []string
	var cur strings.Builder
	for _, line := range strings.SplitAfter(text, "\n") {
		if strings.TrimRight(line, " \t\r\n") == "---" {
			docs = append(docs, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteString(line)
	}
	return append(docs, cur.String())
}

func (v *validator) breakGlass() {
	const f = "break_glass.toml"
	b := v.a.BreakGlass
	if b.MaxDuration < 0 || time.Duration(b.MaxDuration) > maxTimeout {
		v.errf(f, "max_duration", "grants are short by design", "must be between 0 and 24h, got %s", b.MaxDuration)
	}
	seen := map[string]bool{}
	for i, r := range b.Roles {
		if r.Name != "" && seen[r.Name] {
			v.errf(f, fmt.Sprintf("role[%d].name", i), "names must be unique", "role %q is defined twice", r.Name)
		}
		seen[r.Name] = true
	}
}

var installNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

func (v *validator) install(file string, in *config.InstallFile) {
	if !installNameRE.MatchString(in.Name) {
		v.errf(file, "name", "use lowercase letters, digits and -", "%q is not a valid install name", in.Name)
	}
	if in.Parallelism < 0 || in.Parallelism > 64 {
		v.errf(file, "parallelism", "", "must be between 1 and 64, got %d", in.Parallelism)
	}
	v.inputValues(file, "inputs", in.Inputs, true)
	for i, w := range in.Window {
		key := "window"
		if len(in.Window) > 1 {
			key = fmt.Sprintf("window[%d]", i)
		}
		if _, err := window.Parse(w); err != nil {
			v.errf(file, key, "", "%v", err)
		}
	}
	for _, k := range sortedKeys(in.Labels) {
		key := diag.Join("labels", k)
		if err := labels.ValidateKey(k); err != nil {
			v.errf(file, key, "", "%v", err)
		} else if err := labels.ValidateValue(k, in.Labels[k]); err != nil {
			v.errf(file, key, "", "%v", err)
		}
	}
	names := v.components
	if v.a.Sandbox != nil {
		names = append(slices.Clone(names), "sandbox")
	}
	for _, c := range sortedKeys(in.Components) {
		if !slices.Contains(names, c) {
			v.noComponent(file, diag.Join("components", c), "", c, names)
			continue
		}
		v.configLimits(file, diag.Join("components", c)+".config", in.Components[c].Config)
		v.overrideSchema(file, c, in.Components[c].Config)
		template.EachString(diag.Join("components", c)+".config", in.Components[c].Config, func(key, s string) {
			v.refs(file, key, s, c)
		})
	}
}

// overrideSchema checks component c's config with an install's override
// merged over it against the component type's schema, and reports, in the
// install's file at the override's keys, each problem the merge adds
// (what is wrong with the component's own config is reported there).
func (v *validator) overrideSchema(file, c string, over map[string]any) {
	comp := v.a.Sandbox
	if c != "sandbox" {
		comp = nil
		for _, x := range v.a.Components {
			if x.Name == c {
				comp = x
			}
		}
	}
	if comp == nil {
		return
	}
	check := v.types[comp.Type]
	if check == nil {
		return
	}
	type problem struct{ field, msg string }
	had := map[problem]bool{}
	for _, p := range check(comp.Config) {
		had[problem{p.Field, p.Message}] = true
	}
	var added []FieldProblem
	for _, p := range check(template.Merge(comp.Config, over)) {
		if !had[problem{p.Field, p.Message}] {
			added = append(added, p)
		}
	}
	v.configProblems(file, diag.Join("components", c)+".config", added)
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
