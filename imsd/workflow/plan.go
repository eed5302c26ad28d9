// Package workflow turns an app revision and an install into the steps of
// a lifecycle workflow (provision, update, deprovision) and runs them:
// each step is one job for the install's agent, started when the steps it
// needs have succeeded, at most the install's parallelism at a time.
//
// The planner is a pure function of the app, the install and what is
// deployed; the engine keeps all state in the store, so a workflow resumes
// after an imsd restart where it was. Neither knows a component type by
// name: a component's type is passed to its job as it is written in the
// app. Actions run through the action type, which is the action system's
// own (actions/*.toml), not a component type.
package workflow

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/plugins/sdk/configschema"
	"github.com/byoc-dev/byoc/plugins/sdk/jobconfig"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	"github.com/byoc-dev/byoc/schema/app/config"
	"github.com/byoc-dev/byoc/schema/app/diag"
	"github.com/byoc-dev/byoc/schema/app/diff"
	"github.com/byoc-dev/byoc/schema/app/graph"
	"github.com/byoc-dev/byoc/schema/app/template"
)

// The workflow kinds.
const (
	Provision   = "provision"
	Update      = "update"
	Deprovision = "deprovision"
	// Action runs one action of the app (actions/*.toml) as the
	// workflow's only step.
	Action = "action"
)

// Operations of component steps and the type and operation of action steps.
const (
	OpApply   = "apply"
	OpDestroy = "destroy"
	// OpPlan is the operation of the plan jobs of a workflow that requires
	// approval (approval.go) and of a live plan.
	OpPlan = "plan"
	// OpPlanDestroy is the operation of the plan jobs of a destroy step
	// (sdk.OpPlanDestroy): what the destroy would remove.
	OpPlanDestroy = "plan-destroy"
	// ActionType is the plugin type that runs actions/*.toml.
	ActionType = "action"
)

// Reserved top-level keys of a job config (plugins/sdk/jobconfig): the
// agent takes them out before the plugin sees the config.
const (
	// SecretsKey lists the secrets ({{ .secrets.NAME }}) the job needs.
	SecretsKey = jobconfig.SecretsKey
	// CustomerInputsKey lists the customer-provided inputs the job's config
	// refers to ({{ .inputs.NAME }} left for the agent, which reads their
	// values from the install stack).
	CustomerInputsKey = jobconfig.CustomerInputsKey
	// SensitiveKey lists values the agent must redact from everything the
	// job sends back (the values of sensitive inputs).
	SensitiveKey = jobconfig.SensitiveKey
)

const (
	defaultComponentTimeout = 30 * time.Minute
	defaultActionTimeout    = 10 * time.Minute
	// DefaultParallelism is used when neither the app nor the install sets one.
	DefaultParallelism = 4
)

// Target is what an install should become: an app revision with the
// install's inputs and overrides.
type Target struct {
	App      *config.App
	Revision int64
	Install  store.Install
	// Inputs, when set, replace the install's own inputs (a plan with
	// changed inputs, before they are saved).
	Inputs map[string]string
	// Action names the action an action workflow runs.
	Action string
	// Schemas are the component types' config schemas (Renderer.Schemas).
	Schemas map[string]*configschema.Schema
}

// Plan is what a workflow will do.
type Plan struct {
	Kind     string
	Revision int64
	// Inputs are the resolved input values (JSON) the steps render with.
	Inputs json.RawMessage
	// Steps in an order that respects Needs.
	Steps []store.Step
	// Unchanged lists the components the workflow leaves alone.
	Unchanged []string
}

// PlanError lists why a plan cannot be made (bad inputs, a reference to an
// output a component does not have).
type PlanError struct{ Problems []string }

func (e *PlanError) Error() string { return strings.Join(e.Problems, "; ") }

// Make plans a workflow of kind for target t, given what the install runs
// now (deployed).
func Make(kind string, t Target, deployed []store.InstallComponent) (*Plan, error) {
	values := t.Inputs
	if values == nil {
		values = t.Install.Inputs
	}
	inputs, problems := t.App.ResolveInputs(values)
	if len(problems) > 0 {
		pe := &PlanError{}
		for _, p := range problems {
			pe.Problems = append(pe.Problems, p.Error())
		}
		return nil, pe
	}
	raw, err := json.Marshal(inputs)
	if err != nil {
		return nil, err
	}
	p := &planner{t: t, kind: kind, inputs: inputs, deployed: map[string]store.InstallComponent{}, plan: &Plan{Kind: kind, Revision: t.Revision, Inputs: raw}}
	for _, d := range deployed {
		p.deployed[d.Name] = d
	}
	switch kind {
	case Provision, Update:
		err = p.apply()
	case Deprovision:
		err = p.deprovision()
	case Action:
		err = p.action()
	default:
		return nil, fmt.Errorf("no workflow kind %q (provision, update, deprovision or action)", kind)
	}
	if err != nil {
		return nil, err
	}
	return p.plan, nil
}

type planner struct {
	t        Target
	kind     string
	inputs   map[string]any
	deployed map[string]store.InstallComponent
	plan     *Plan
	names    map[string]bool
	renderer *Renderer
}

func (p *planner) add(st store.Step) string {
	if p.names == nil {
		p.names = map[string]bool{}
	}
	p.names[st.Name] = true
	st.Needs = slices.Compact(slices.Sorted(slices.Values(st.Needs)))
	p.plan.Steps = append(p.plan.Steps, st)
	return st.Name
}

// hooks returns the actions with a trigger of type typ: global ones
// (component "") when component is "", else those scoped to component.
func (p *planner) hooks(typ, component string) []*config.Action {
	var out []*config.Action
	for _, a := range p.t.App.Actions {
		for _, tr := range a.Triggers {
			if tr.Type == typ && tr.Component == component {
				out = append(out, a)
				break
			}
		}
	}
	return out
}

// addHooks adds one step per action triggered by typ (around component
// when set), each needing needs, and returns their names.
func (p *planner) addHooks(typ, component string, needs []string) ([]string, error) {
	var out []string
	for _, a := range p.hooks(typ, component) {
		name := typ + ":" + a.Name
		if component != "" {
			name += ":" + component
		}
		cfg, err := ActionConfig(p.t.App, a)
		if err != nil {
			return nil, err
		}
		reason := typ + " hook"
		if component != "" {
			reason += " of " + component
		}
		out = append(out, p.add(store.Step{Name: name, Action: a.Name, ComponentType: ActionType, Operation: OpApply,
			Needs: slices.Clone(needs), Reason: reason, Config: cfg, Timeout: timeoutOr(a.Timeout, defaultActionTimeout)}))
	}
	return out, nil
}

func timeoutOr(d config.Duration, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return time.Duration(d)
}

// apply plans a provision or an update: every component whose rendered
// config differs from what is deployed, and everything downstream of it,
// in dependency order; components no longer in the app are destroyed
// after.
func (p *planner) apply() error {
	app := p.t.App
	g := app.Graph()
	var before []string
	if p.kind == Provision {
		var err error
		if before, err = p.addHooks("pre_provision", "", nil); err != nil {
			return err
		}
	}
	// Which components change, and why, in dependency order.
	type change struct{ name, reason string }
	var changes []change
	changing := map[string]bool{}
	var problems []string
	for _, n := range g.Order() {
		c := app.Component(n)
		reason := ""
		if _, ok := p.deployed[n]; !ok {
			reason = "new"
		}
		for _, d := range g.Deps(n) {
			if reason != "" {
				break
			}
			if changing[d] {
				reason = "downstream of " + d
				break
			}
		}
		if reason == "" {
			rendered, _, err := p.render(n, c)
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			reason = p.why(n, c, rendered)
		}
		if reason == "" {
			p.plan.Unchanged = append(p.plan.Unchanged, n)
			continue
		}
		changing[n] = true
		changes = append(changes, change{n, reason})
	}
	if len(problems) > 0 {
		return &PlanError{Problems: problems}
	}
	var removed []string
	for n := range p.deployed {
		if app.Component(n) == nil {
			removed = append(removed, n)
		}
	}
	slices.Sort(removed)
	var all []string // every step so far, for the hooks that come last
	all = append(all, before...)
	if len(changes) > 0 {
		pre, err := p.addHooks("pre_deploy", "", before)
		if err != nil {
			return err
		}
		all = append(all, pre...)
		start := append(slices.Clone(before), pre...)
		// done[n] are the steps that must succeed before n's users start:
		// n itself and its post-deploy hooks.
		done := map[string][]string{}
		for _, ch := range changes {
			c := app.Component(ch.name)
			needs := slices.Clone(start)
			for _, d := range g.Deps(ch.name) {
				needs = append(needs, done[d]...)
			}
			around, err := p.addHooks("pre_deploy", ch.name, needs)
			if err != nil {
				return err
			}
			cfg, err := json.Marshal(p.config(ch.name, c))
			if err != nil {
				return err
			}
			step := p.add(store.Step{Name: ch.name, Component: ch.name, ComponentType: c.Type, Operation: OpApply,
				Needs: append(needs, around...), Reason: ch.reason, Config: cfg, Timeout: timeoutOr(c.Timeout, defaultComponentTimeout)})
			post, err := p.addHooks("post_deploy", ch.name, []string{step})
			if err != nil {
				return err
			}
			done[ch.name] = append([]string{step}, post...)
			all = append(all, around...)
			all = append(all, done[ch.name]...)
		}
		post, err := p.addHooks("post_deploy", "", slices.Clone(all))
		if err != nil {
			return err
		}
		all = append(all, post...)
	}
	if len(removed) > 0 {
		destroyed, err := p.destroy(removed, slices.Clone(all), "no longer in revision %d")
		if err != nil {
			return err
		}
		all = append(all, destroyed...)
	}
	if p.kind == Provision {
		if _, err := p.addHooks("post_provision", "", all); err != nil {
			return err
		}
	}
	return nil
}

// destroy adds the steps that destroy the deployed components names, each
// after every component that needed it, with the teardown hooks around
// them; every step needs after. It returns the names of the steps added.
func (p *planner) destroy(names []string, after []string, reasonFormat string) ([]string, error) {
	pre, err := p.addHooks("pre_teardown", "", after)
	if err != nil {
		return nil, err
	}
	var added []string
	added = append(added, pre...)
	start := append(slices.Clone(after), pre...)
	set := map[string]bool{}
	for _, n := range names {
		set[n] = true
	}
	// users[n]: the deployed components being destroyed that need n.
	deps := map[string][]string{}
	for _, n := range names {
		var d []string
		for _, x := range p.deployed[n].Needs {
			if set[x] {
				d = append(d, x)
			}
		}
		deps[n] = d
	}
	g := graph.New(deps)
	order := g.Order()
	slices.Reverse(order)
	done := map[string][]string{}
	for _, n := range order {
		d := p.deployed[n]
		needs := slices.Clone(start)
		for _, u := range g.Users(n) {
			needs = append(needs, done[u]...)
		}
		around, err := p.addHooks("pre_teardown", n, needs)
		if err != nil {
			return nil, err
		}
		reason := "deprovision"
		if reasonFormat != "" {
			reason = fmt.Sprintf(reasonFormat, p.t.Revision)
		}
		step := p.add(store.Step{Name: n, Component: n, ComponentType: d.ComponentType, Operation: OpDestroy,
			Needs: append(needs, around...), Reason: reason, Config: d.Config, Timeout: defaultComponentTimeout})
		if c := p.t.App.Component(n); c != nil && c.Type == d.ComponentType {
			p.plan.Steps[len(p.plan.Steps)-1].Timeout = timeoutOr(c.Timeout, defaultComponentTimeout)
		}
		post, err := p.addHooks("post_teardown", n, []string{step})
		if err != nil {
			return nil, err
		}
		done[n] = append([]string{step}, post...)
		added = append(added, around...)
		added = append(added, done[n]...)
	}
	post, err := p.addHooks("post_teardown", "", append(slices.Clone(after), added...))
	if err != nil {
		return nil, err
	}
	return append(added, post...), nil
}

// deprovision plans the teardown of everything deployed, in reverse
// dependency order, between the deprovision hooks.
func (p *planner) deprovision() error {
	pre, err := p.addHooks("pre_deprovision", "", nil)
	if err != nil {
		return err
	}
	names := slices.Sorted(maps.Keys(p.deployed))
	destroyed, err := p.destroy(names, pre, "")
	if err != nil {
		return err
	}
	_, err = p.addHooks("post_deprovision", "", append(pre, destroyed...))
	return err
}

// action plans an action run: one step, the action, named after it.
func (p *planner) action() error {
	a := p.t.App.Action(p.t.Action)
	if a == nil {
		return &PlanError{Problems: []string{UnknownAction(p.t.App, p.t.Action, p.t.Revision).Error()}}
	}
	cfg, err := ActionConfig(p.t.App, a)
	if err != nil {
		return err
	}
	p.add(store.Step{Name: a.Name, Action: a.Name, ComponentType: ActionType, Operation: OpApply,
		Reason: "action run", Config: cfg, Timeout: timeoutOr(a.Timeout, defaultActionTimeout)})
	return nil
}

// UnknownAction is the error for an action app revision rev does not
// have: the closest name, and the actions it has.
func UnknownAction(app *config.App, name string, rev int64) error {
	var names []string
	for _, a := range app.Actions {
		names = append(names, a.Name)
	}
	if len(names) == 0 {
		return errs.Field("action", "no action named %q: app revision %d has no actions", name, rev)
	}
	hint := diag.DidYouMean(name, names)
	if hint != "" {
		hint += " "
	}
	return errs.Field("action", "no action named %q in app revision %d; %sits actions: %s", name, rev, hint, strings.Join(names, ", "))
}

// config is component n's config with the install's override merged over it.
func (p *planner) config(n string, c *config.Component) map[string]any {
	cfg := c.Config
	if o, ok := p.t.Install.Settings.Overrides[n]; ok {
		cfg = template.Merge(cfg, o)
	}
	if cfg == nil {
		cfg = map[string]any{}
	}
	return cfg
}

// render renders component n's config with what is deployed now.
func (p *planner) render(n string, c *config.Component) (map[string]any, []string, error) {
	if p.renderer == nil {
		outputs := make(map[string]map[string]string, len(p.deployed))
		for name, d := range p.deployed {
			outputs[name] = d.Outputs
		}
		p.renderer = &Renderer{InstallID: p.t.Install.ID, InstallName: p.t.Install.Name, Inputs: p.inputs, Outputs: outputs, Schemas: p.t.Schemas,
			Customer: CustomerInputs(p.t.App)}
	}
	r := p.renderer
	r.secrets = nil
	cfg, err := r.Config(c.Type, p.config(n, c))
	if err != nil {
		return nil, nil, fmt.Errorf("component %s: %w", n, err)
	}
	return cfg, r.Secrets(), nil
}

// why says why component n must be deployed, or "" when what is deployed
// is what would be.
func (p *planner) why(n string, c *config.Component, rendered map[string]any) string {
	d, ok := p.deployed[n]
	switch {
	case !ok:
		return "new"
	case d.ComponentType != c.Type:
		return fmt.Sprintf("type changed from %s to %s", d.ComponentType, c.Type)
	}
	canon, digest := Canonical(rendered)
	if digest == d.Digest {
		return ""
	}
	var old any
	if err := json.Unmarshal(d.Config, &old); err != nil {
		return "config changed"
	}
	var now any
	json.Unmarshal(canon, &now) //nolint:errcheck // our own encoding
	fields := diff.Fields("config", old, now)
	if len(fields) == 0 {
		return "config changed"
	}
	if len(fields) > 3 {
		fields = append(fields[:3], fmt.Sprintf("and %d more", len(fields)-3))
	}
	return "changed: " + strings.Join(fields, ", ")
}

// Canonical returns the canonical JSON of a rendered config and its digest:
// what install components store and plans compare. (Maps marshal with
// sorted keys; an integer marshals the same whether it was decoded as an
// int64 from TOML or a float64 from JSON.)
func Canonical(cfg map[string]any) ([]byte, string) {
	b, _ := json.Marshal(cfg)
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:])
}

// ActionConfig is the action type's config of an app action: its steps
// (file steps read from the revision), environment and network setting.
// Only environment values hold references; they are rendered when the step
// starts.
func ActionConfig(app *config.App, a *config.Action) ([]byte, error) {
	var steps []map[string]any
	for i, st := range a.Steps {
		script := st.Script
		if st.File != "" {
			b, ok := app.Files[strings.TrimPrefix(st.File, "./")]
			if !ok {
				return nil, fmt.Errorf("action %s: step[%d].file %q is not part of the revision", a.Name, i, st.File)
			}
			script = string(b)
		}
		m := map[string]any{"name": st.Name, "script": script}
		if len(st.Env) > 0 {
			m["env"] = st.Env
		}
		steps = append(steps, m)
	}
	cfg := map[string]any{"steps": steps, "sandbox": map[string]any{"network": a.Network}}
	if len(a.Env) > 0 {
		cfg["env"] = a.Env
	}
	return json.Marshal(cfg)
}

// Renderer resolves the references of one install's configs.
type Renderer struct {
	InstallID, InstallName string
	Inputs                 map[string]any
	// Outputs holds each deployed component's outputs ("sandbox" too).
	Outputs map[string]map[string]string
	// Schemas are the config schemas of component types (nil or missing:
	// the type has none), which say where a whole-value reference keeps
	// its type (Config).
	Schemas map[string]*configschema.Schema
	// Customer names the customer-provided inputs: the agent resolves
	// them from the install stack, so they stay references
	// (agentproto.InputRef) and are collected.
	Customer map[string]bool
	// Deferred names the components (and "sandbox") whose outputs the
	// agent renders: an offline bundle deploys them before the steps
	// that refer to them, so their references stay
	// (agentproto.OutputRef).
	Deferred map[string]bool
	secrets  map[string]bool
	customer map[string]bool
}

// CustomerInputs returns the names of app's customer-provided inputs.
func CustomerInputs(app *config.App) map[string]bool {
	out := map[string]bool{}
	for _, in := range app.Inputs.Inputs {
		if in.ProvidedBy == "customer" {
			out[in.Name] = true
		}
	}
	return out
}

// Resolve implements template.Resolver. Secrets are left as references
// for the agent and collected.
func (r *Renderer) Resolve(ref template.Ref) (any, error) {
	switch ref.Root {
	case "install":
		if ref.Field == "name" {
			return r.InstallName, nil
		}
		return r.InstallID, nil
	case "inputs":
		if r.Customer[ref.Name] {
			if r.customer == nil {
				r.customer = map[string]bool{}
			}
			r.customer[ref.Name] = true
			return agentproto.InputRef(ref.Name), nil
		}
		v, ok := r.Inputs[ref.Name]
		if !ok {
			return nil, fmt.Errorf("input %q has no value for this install", ref.Name)
		}
		return v, nil
	case "secrets":
		if r.secrets == nil {
			r.secrets = map[string]bool{}
		}
		r.secrets[ref.Name] = true
		return template.SecretRef(ref.Name), nil
	case "sandbox", "components":
		name := ref.Name
		if ref.Root == "sandbox" {
			name = "sandbox"
		}
		if r.Deferred[name] {
			return agentproto.OutputRef(name, ref.Output), nil
		}
		outs, ok := r.Outputs[name]
		if !ok {
			return nil, fmt.Errorf("%s is not deployed in this install, so %s has no value", name, ref)
		}
		v, ok := outs[ref.Output]
		if !ok {
			have := slices.Sorted(maps.Keys(outs))
			if len(have) == 0 {
				return nil, fmt.Errorf("%s has no output %q: its last deploy reported no outputs", name, ref.Output)
			}
			return nil, fmt.Errorf("%s has no output %q (its outputs: %s)", name, ref.Output, strings.Join(have, ", "))
		}
		return v, nil
	}
	return nil, errors.New("unknown reference " + ref.String())
}

// Config renders every string of a config of component type typ. A
// template inside a string renders to a string, except a whole-value
// reference ("{{ .inputs.replicas }}") where the type's schema wants a
// number or a bool and no string: there it keeps the value's type.
func (r *Renderer) Config(typ string, cfg map[string]any) (map[string]any, error) {
	var keep func([]string) bool
	if sch := r.Schemas[typ]; sch != nil {
		keep = func(loc []string) bool { return wantsNonString(sch.TypesAt(loc)) }
	}
	v, err := template.RenderValue("config", cfg, r.Resolve, keep)
	if err != nil {
		return nil, err
	}
	m, _ := v.(map[string]any)
	return m, nil
}

// wantsNonString reports whether a schema's types at a field want a number
// or a bool and not a string.
func wantsNonString(types []string) bool {
	if slices.Contains(types, "string") {
		return false
	}
	return slices.ContainsFunc(types, func(t string) bool { return t == "number" || t == "integer" || t == "boolean" })
}

// Secrets returns the names of the secrets rendered configs referred to.
func (r *Renderer) Secrets() []string { return slices.Sorted(maps.Keys(r.secrets)) }

// CustomerRefs returns the names of the customer-provided inputs rendered
// configs referred to.
func (r *Renderer) CustomerRefs() []string { return slices.Sorted(maps.Keys(r.customer)) }
