package config

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/template/parse"
)

// Resolver returns the value of one reference. Render calls it for every
// {{ }} in a string.
type Resolver func(Ref) (any, error)

// RenderString replaces the references in s with what resolve returns. A
// string that is exactly one reference ("{{ .inputs.replicas }}") takes the
// value itself, so a number input stays a number; otherwise each value is
// written into the text. A string without {{ is returned as it is.
func RenderString(s string, resolve Resolver) (any, error) {
	if !strings.Contains(s, "{{") {
		return s, nil
	}
	segs, err := segmentsOf(s)
	if err != nil {
		return nil, err
	}
	if len(segs) == 1 && segs[0].ref != nil {
		return resolve(*segs[0].ref)
	}
	var b strings.Builder
	for _, sg := range segs {
		if sg.ref == nil {
			b.WriteString(sg.text)
			continue
		}
		v, err := resolve(*sg.ref)
		if err != nil {
			return nil, err
		}
		b.WriteString(formatValue(v))
	}
	return b.String(), nil
}

// A segment of a config string is plain text or one reference.
type segment struct {
	text string
	ref  *Ref
}

// segmentCache keeps the parsed segments of config strings: a fleet renders
// the same strings for every install.
var segmentCache struct {
	sync.Mutex
	m map[string][]segment
}

// segmentsOf parses s into text and references.
func segmentsOf(s string) ([]segment, error) {
	segmentCache.Lock()
	segs, ok := segmentCache.m[s]
	segmentCache.Unlock()
	if ok {
		return segs, nil
	}
	trees, err := parse.Parse("config", s, "{{", "}}")
	if err != nil {
		return nil, fmt.Errorf("reference syntax: %v", err)
	}
	for _, n := range trees["config"].Root.Nodes {
		switch n := n.(type) {
		case *parse.TextNode:
			segs = append(segs, segment{text: string(n.Text)})
		case *parse.ActionNode:
			f, ok := plainField(n)
			if !ok {
				return nil, fmt.Errorf("{{%s}} is not a plain reference", n.Pipe)
			}
			r, rerr := refOf(f.Ident)
			if rerr != nil {
				return nil, fmt.Errorf("%s", rerr.msg)
			}
			segs = append(segs, segment{ref: &r})
		default:
			return nil, fmt.Errorf("%q is not allowed in config", n.String())
		}
	}
	segmentCache.Lock()
	if segmentCache.m == nil || len(segmentCache.m) > 100_000 {
		segmentCache.m = map[string][]segment{}
	}
	segmentCache.m[s] = segs
	segmentCache.Unlock()
	return segs, nil
}

func plainField(n *parse.ActionNode) (*parse.FieldNode, bool) {
	if len(n.Pipe.Decl) > 0 || len(n.Pipe.Cmds) != 1 || len(n.Pipe.Cmds[0].Args) != 1 {
		return nil, false
	}
	f, ok := n.Pipe.Cmds[0].Args[0].(*parse.FieldNode)
	return f, ok
}

// formatValue writes a resolved value into text.
func formatValue(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

// RenderValue renders every string inside a config value (maps and lists
// are walked) and returns a new value; v is not changed. An error names
// the key path of the string that failed.
func RenderValue(path string, v any, resolve Resolver) (any, error) {
	switch v := v.(type) {
	case string:
		out, err := RenderString(v, resolve)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cmpPath(path), err)
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			var err error
			if out[i], err = RenderValue(fmt.Sprintf("%s[%d]", path, i), e, resolve); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			r, err := RenderValue(join(path, k), e, resolve)
			if err != nil {
				// Report the first failing key in key order, whatever
				// order the map was walked in.
				for _, k := range slices.Sorted(maps.Keys(v)) {
					if _, err := RenderValue(join(path, k), v[k], resolve); err != nil {
						return nil, err
					}
				}
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	}
	return v, nil
}

func cmpPath(p string) string {
	if p == "" {
		return "value"
	}
	return p
}

// SecretRef is how a {{ .secrets.NAME }} reference stays in a rendered
// config: imsd never knows secret values; the agent replaces it.
func SecretRef(name string) string { return "{{ .secrets." + name + " }}" }

// secretRefRE matches SecretRef's output and the spellings a config may use.
var secretRefRE = regexp.MustCompile(`\{\{-?\s*\.secrets\.([A-Za-z_][A-Za-z0-9_]*)\s*-?\}\}`)

// ReplaceSecrets replaces every {{ .secrets.NAME }} in s with lookup(NAME).
// It is what the agent does with a rendered config; a name lookup does
// not know is an error.
func ReplaceSecrets(s string, lookup func(string) (string, bool)) (string, error) {
	var missing []string
	out := secretRefRE.ReplaceAllStringFunc(s, func(m string) string {
		name := secretRefRE.FindStringSubmatch(m)[1]
		v, ok := lookup(name)
		if !ok {
			missing = append(missing, name)
			return m
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("secret %q is not defined", missing[0])
	}
	return out, nil
}

// Merge returns base with over merged onto it: tables merge key by key,
// any other value replaces. Neither argument is changed.
func Merge(base, over map[string]any) map[string]any {
	out := maps.Clone(base)
	if out == nil {
		out = map[string]any{}
	}
	for k, v := range over {
		bm, ok1 := out[k].(map[string]any)
		om, ok2 := v.(map[string]any)
		if ok1 && ok2 {
			out[k] = Merge(bm, om)
			continue
		}
		out[k] = v
	}
	return out
}

// ResolveInputs returns the value of every input for an install that sets
// values (as text, the way the API and CLI carry them): the install's
// value parsed as the input's type, else install_defaults.inputs, else the
// input's default. Customer-provided inputs without a value are left out.
// Every problem is returned, each naming the input.
func (a *App) ResolveInputs(values map[string]string) (map[string]any, []error) {
	var problems []error
	byName := map[string]Input{}
	for _, in := range a.Inputs.Inputs {
		byName[in.Name] = in
	}
	names := slices.Sorted(maps.Keys(byName))
	for _, name := range slices.Sorted(maps.Keys(values)) {
		if _, ok := byName[name]; !ok {
			problems = append(problems, fmt.Errorf("inputs.%s: no input named %q%s", name, name, suffix(didYouMean(name, names))))
		}
	}
	out := map[string]any{}
	for _, in := range a.Inputs.Inputs {
		if s, ok := values[in.Name]; ok {
			v, err := ParseInputValue(in, s)
			if err == nil {
				if msg := checkInputValue(in, v); msg != "" {
					err = fmt.Errorf("%s", msg)
				}
			}
			if err != nil {
				problems = append(problems, fmt.Errorf("inputs.%s: %w", in.Name, err))
				continue
			}
			out[in.Name] = v
			continue
		}
		if v, ok := a.Metadata.InstallDefaults.Inputs[in.Name]; ok {
			out[in.Name] = v
			continue
		}
		if in.Default != nil {
			out[in.Name] = in.Default
			continue
		}
		if in.Required && in.ProvidedBy != "customer" {
			problems = append(problems, fmt.Errorf("inputs.%s: required input %q is not set (byoc install update INSTALL --input %s=VALUE)", in.Name, in.Name, in.Name))
		}
	}
	return out, problems
}

func suffix(hint string) string {
	if hint == "" {
		return ""
	}
	return " (" + hint + ")"
}

// ParseInputValue reads the text form of a value of input in.
func ParseInputValue(in Input, s string) (any, error) {
	switch in.Type {
	case "number":
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("input %q is a number, not %q", in.Name, s)
		}
		return f, nil
	case "bool":
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, fmt.Errorf("input %q is a boolean (true or false), not %q", in.Name, s)
		}
		return b, nil
	}
	return s, nil
}

// InputText is the text form of an input value, as installs store it.
func InputText(v any) string { return formatValue(v) }

// SensitiveInputs returns the names of the inputs marked sensitive.
func (a *App) SensitiveInputs() []string {
	var out []string
	for _, in := range a.Inputs.Inputs {
		if in.Sensitive {
			out = append(out, in.Name)
		}
	}
	return out
}

// Component returns the component (or, for "sandbox", the sandbox) named
// name, or nil.
func (a *App) Component(name string) *Component {
	if name == "sandbox" {
		return a.Sandbox
	}
	i, ok := slices.BinarySearchFunc(a.Components, name, func(c *Component, n string) int { return strings.Compare(c.Name, n) })
	if !ok {
		return nil
	}
	return a.Components[i]
}

// Action returns the action named name, or nil.
func (a *App) Action(name string) *Action {
	for _, ac := range a.Actions {
		if ac.Name == name {
			return ac
		}
	}
	return nil
}

// CronSchedules returns the schedules of the action's cron triggers.
func (ac *Action) CronSchedules() []string {
	var out []string
	for _, t := range ac.Triggers {
		if t.Type == "cron" && t.Schedule != "" {
			out = append(out, t.Schedule)
		}
	}
	return out
}

// PermissionMode is the permission mode the action needs: its mode, or
// maintenance (the default) when it names none.
func (ac *Action) PermissionMode() string {
	if ac.Mode == "" {
		return "maintenance"
	}
	return ac.Mode
}
