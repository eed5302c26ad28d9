// Package config is the app config format and its decoding: the Go type
// of each file of an app directory (app.toml, inputs.toml, components/*.toml,
// ...), App (a whole config as read, with the file and line of every key),
// a TOML reader on go-toml's unstable parser that keeps those lines, and a
// reflective decoder driven by the types' struct tags (which also drive the
// JSON Schemas of package jsonschema). Decode reports every problem of the
// files' shape; package validate checks what the values mean, and package
// load does both.
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"path"
	"reflect"
	"slices"
	"strings"

	"github.com/byoc-dev/byoc/schema/app/diag"
	"github.com/byoc-dev/byoc/schema/app/graph"
	"github.com/byoc-dev/byoc/schema/app/template"
)

// The files of an app directory, in the order they are read.
var fileOrder = []string{
	"app.toml", "inputs.toml", "secrets.toml", "sandbox.toml", "permissions.toml",
	"policies.toml", "break_glass.toml", "telemetry.toml", "components/", "actions/", "debug/", "installs/",
}

// topLevel are the single files an app directory may hold.
var topLevel = []string{"app.toml", "inputs.toml", "secrets.toml", "sandbox.toml", "permissions.toml", "policies.toml", "break_glass.toml", "telemetry.toml"}

// dirs are the folders of one-file-per-item TOML files.
var dirs = []string{"components", "actions", "debug", "installs"}

// MaxFileBytes caps each file of an app config.
const MaxFileBytes = 1 << 20

// App is an app config as read: every file decoded into its Go type,
// with the file and line each key came from.
type App struct {
	Metadata Metadata
	Inputs   InputsFile
	Secrets  SecretsFile
	Sandbox  *Component
	// ClusterPolicies is the component that installs policies.toml's
	// cluster policies (nil without any): a helm release of their
	// manifests, named ClusterPoliciesName, after the sandbox and before
	// every other component. Decode makes it; no file declares it.
	ClusterPolicies *Component
	Components      []*Component    // sorted by name
	Actions         []*Action       // sorted by name
	DebugCommands   []*DebugCommand // sorted by name (debug/*.toml)
	Permissions     Permissions
	Policies        PoliciesFile
	BreakGlass      BreakGlass
	Telemetry       Telemetry      // telemetry.toml
	Installs        []*InstallFile // sorted by name

	// Warnings are what the checks found worth saying that lets the
	// config through (load.Parse sets them).
	Warnings []diag.Diagnostic

	// Files holds every file of the config (TOML and the scripts and
	// policies they name), by slash-separated path: what a revision stores.
	Files map[string][]byte

	// lines maps file -> key path -> line.
	lines map[string]map[string]int
	// origin maps a component, action or install name to its file (the
	// first, when two files define one name).
	origin map[string]string
	// source maps each component, action and install (its pointer) to
	// its own file.
	source map[any]string
	// unparsed are the files that are not TOML (a syntax error): nothing
	// of them was decoded.
	unparsed []string
	// graph is the component graph, built once by Decode (references
	// are parsed to find implied dependencies).
	graph *graph.Graph
}

// FileRank orders files the way Decode reads them, app.toml first: the
// order of an Error's diagnostics (diag.List.Rank).
func FileRank(file string) int {
	for i, name := range fileOrder {
		if file == name || strings.HasPrefix(file, name) {
			return i
		}
	}
	return len(fileOrder)
}

// Decode reads an app config given as its files, by slash-separated path
// relative to the app directory, into an App, adding to ds every problem
// of its files: a missing app.toml, files byoc does not read, TOML syntax,
// unknown keys, wrong types, missing required keys, values outside an enum,
// and names two files define. What the values mean is checked by package
// validate. Decode builds the component graph once, so an App may be read
// from several goroutines afterwards.
func Decode(files map[string][]byte, ds *diag.List) *App {
	a := &App{Files: files, lines: map[string]map[string]int{}, origin: map[string]string{}, source: map[any]string{}}
	if _, ok := files["app.toml"]; !ok {
		ds.Addf("app.toml", 0, "", "every app directory has one, with at least name = \"...\"", "is missing")
	}
	// Unknown TOML files are mistakes too: a typo would otherwise be
	// silently left out of the app.
	for _, p := range slices.Sorted(maps.Keys(files)) {
		if !strings.HasSuffix(p, ".toml") {
			continue
		}
		dir, base := path.Split(p)
		switch {
		case dir == "" && slices.Contains(topLevel, base):
		case dir != "" && slices.Contains(dirs, strings.TrimSuffix(dir, "/")):
		case dir == "":
			hint := diag.DidYouMean(base, topLevel)
			if hint == "" {
				hint = "an app directory holds " + strings.Join(topLevel, ", ") + " and the folders components/, actions/, debug/ and installs/"
			}
			ds.Addf(p, 0, "", hint, "is not a file byoc reads")
		default:
			top, _, _ := strings.Cut(dir, "/")
			hint := diag.DidYouMean(top, dirs)
			if hint == "" {
				hint = "TOML files go in components/, actions/, debug/ or installs/, one level deep"
			}
			ds.Addf(p, 0, "", hint, "is not in a folder byoc reads")
		}
	}
	decodeFile := func(name string, dst any) bool {
		b, ok := files[name]
		if !ok {
			return false
		}
		lines, ok := decodeFile(name, b, dst, ds)
		if ok {
			a.lines[name] = lines
		} else {
			a.unparsed = append(a.unparsed, name)
		}
		return ok
	}
	decodeFile("app.toml", &a.Metadata)
	decodeFile("inputs.toml", &a.Inputs)
	decodeFile("secrets.toml", &a.Secrets)
	var sb Component
	if decodeFile("sandbox.toml", &sb) {
		if sb.Name != "" && sb.Name != "sandbox" {
			ds.Addf("sandbox.toml", a.Line("sandbox.toml", "name"), "name", "leave it out", "the sandbox is always named \"sandbox\", not %q", sb.Name)
		}
		sb.Name = "sandbox"
		a.Sandbox = &sb
	}
	decodeFile("permissions.toml", &a.Permissions)
	decodeFile("policies.toml", &a.Policies)
	a.ClusterPolicies = clusterPoliciesComponent(a.Policies.ClusterPolicies, files)
	decodeFile("break_glass.toml", &a.BreakGlass)
	decodeFile("telemetry.toml", &a.Telemetry)
	a.Components = loadDir(a, ds, files, "components", "component", decodeFile, func(c *Component) *string { return &c.Name })
	a.Actions = loadDir(a, ds, files, "actions", "action", decodeFile, func(c *Action) *string { return &c.Name })
	a.DebugCommands = loadDir(a, ds, files, "debug", "debug command", decodeFile, func(c *DebugCommand) *string { return &c.Name })
	a.Installs = loadDir(a, ds, files, "installs", "install", decodeFile, func(c *InstallFile) *string { return &c.Name })
	a.Graph()
	return a
}

// decodeFile reads one TOML file of an app config into dst, a pointer to
// its Go type, adding its problems to ds. It returns the line of every key
// path it decoded, or false when the file is not TOML and nothing was
// decoded.
func decodeFile(file string, data []byte, dst any, ds *diag.List) (map[string]int, bool) {
	root, d := parseTOML(file, data)
	if d != nil {
		ds.Add(*d)
		return nil, false
	}
	dec := &decoder{file: file, ds: ds, lines: map[string]int{}}
	dec.decodeStruct("", &value{kind: kTable, line: 1, table: root}, reflect.ValueOf(dst).Elem())
	return dec.lines, true
}

// loadDir decodes the one-item-per-file TOML files of a folder, naming
// each item after its file unless it has a name, sorted by name.
func loadDir[T any](a *App, ds *diag.List, files map[string][]byte, dir, kind string, decode func(string, any) bool, name func(*T) *string) []*T {
	var out []*T
	for _, p := range inDir(files, dir) {
		item := new(T)
		if !decode(p, item) {
			continue
		}
		if n := name(item); *n == "" {
			*n = stem(p)
		}
		out = append(out, item)
		a.source[item] = p
		a.addOrigin(ds, kind, *name(item), p)
	}
	sortByName(out, func(x *T) string { return *name(x) })
	return out
}

// addOrigin remembers which file defined a name, reporting a name that two
// files define.
func (a *App) addOrigin(ds *diag.List, kind, name, file string) {
	k := kind + "/" + name
	if prev, ok := a.origin[k]; ok {
		ds.Addf(file, a.Line(file, "name"), "name", "names must be unique; rename one of them", "%s %q is also defined in %s", kind, name, prev)
		return
	}
	a.origin[k] = file
}

// Unparsed returns the files that did not parse as TOML. What they
// define is missing from the app, so checks across files would report
// its absence again and again (load.Parse skips them).
func (a *App) Unparsed() []string { return a.unparsed }

// FileOf returns the file a component, action or install was read from
// (kind "component", "action" or "install"); the first, when two files
// define the name (which Decode reports).
func (a *App) FileOf(kind, name string) string {
	return a.origin[kind+"/"+name]
}

// Source returns the file a component, action or install was read from,
// given as its pointer in Components, Actions or Installs: its own file,
// even when another file defines the same name.
func (a *App) Source(item any) string {
	return a.source[item]
}

// Line returns the line of a key path in a file, or of its closest
// recorded parent, or 0.
func (a *App) Line(file, key string) int {
	m := a.lines[file]
	for key != "" {
		if l, ok := m[key]; ok {
			return l
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			break
		}
		key = key[:i]
	}
	return 0
}

func inDir(files map[string][]byte, dir string) []string {
	var out []string
	for p := range files {
		d, base := path.Split(p)
		if d == dir+"/" && strings.HasSuffix(base, ".toml") {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

func stem(p string) string { return strings.TrimSuffix(path.Base(p), ".toml") }

func sortByName[T any](s []T, name func(T) string) {
	slices.SortFunc(s, func(a, b T) int { return strings.Compare(name(a), name(b)) })
}

// Digest is the SHA-256 of an app config's files: their paths and
// contents, in path order.
func Digest(files map[string][]byte) string {
	h := sha256.New()
	for _, p := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(h, "%d:%s\n%d:", len(p), p, len(files[p]))
		h.Write(files[p])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Graph returns the app's component graph. The sandbox, when there is
// one, precedes every component. Decode builds it once.
func (a *App) Graph() *graph.Graph {
	if a.graph == nil {
		a.graph = graph.New(a.dependencies())
	}
	return a.graph
}

// dependencies returns every component's dependencies: listed, implied by
// output references, and the sandbox.
func (a *App) dependencies() map[string][]string {
	deps := map[string][]string{}
	if a.Sandbox != nil {
		deps["sandbox"] = nil
	}
	if a.ClusterPolicies != nil {
		deps[ClusterPoliciesName] = nil
		if a.Sandbox != nil {
			deps[ClusterPoliciesName] = []string{"sandbox"}
		}
	}
	for _, c := range a.Components {
		d := slices.Clone(c.Dependencies)
		for _, r := range configRefs(c.Config) {
			if r.Root == "components" {
				d = append(d, r.Name)
			}
		}
		if a.Sandbox != nil {
			d = append(d, "sandbox")
		}
		if a.ClusterPolicies != nil {
			d = append(d, ClusterPoliciesName)
		}
		deps[c.Name] = d
	}
	return deps
}

// configRefs returns the well-formed references in a config.
func configRefs(cfg map[string]any) []template.Ref {
	var out []template.Ref
	template.EachString("", cfg, func(_, s string) {
		refs, err := template.Refs(s)
		if err == nil {
			out = append(out, refs...)
		}
	})
	return out
}

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

// Component returns the component (or, for "sandbox", the sandbox, and
// for ClusterPoliciesName, the cluster policies) named name, or nil.
func (a *App) Component(name string) *Component {
	if name == "sandbox" {
		return a.Sandbox
	}
	if name == ClusterPoliciesName {
		return a.ClusterPolicies
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
