// Package kvfile is a component type that keeps a file of KEY=value lines:
//
//	{"path": "/etc/app.env", "entries": {"PORT": "8080", "MODE": "prod"}}
//
// Plan lists one change per key and saves the file it would write in the
// plan directory; Apply writes exactly that file when an operator approved
// the plan; Drift compares the file with what was applied; PlanDestroy
// and Destroy remove it. Import adopts a file that already exists (its
// import id is the file's path): the next plan shows what differs from
// the config, nothing if the file matches.
package kvfile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/byoc-dev/byoc/plugins/sdk"
)

// Plugin is the kvfile component type.
type Plugin struct{}

// Schema is the config schema: the keys' form is checked by
// propertyNames, so a bad key is reported with the rest of the config.
const Schema = `{
  "type": "object",
  "required": ["path", "entries"],
  "additionalProperties": false,
  "properties": {
    "path": {"type": "string", "pattern": "^/", "description": "absolute path of the file"},
    "entries": {
      "type": "object",
      "propertyNames": {"pattern": "^[A-Z_][A-Z0-9_]*$", "description": "an upper-case variable name"},
      "additionalProperties": {"type": "string"}
    },
    "secret_entries": {
      "type": "object",
      "sensitive": true,
      "description": "entries whose values byoc masks in logs, plans, outputs and job configs",
      "propertyNames": {"pattern": "^[A-Z_][A-Z0-9_]*$", "description": "an upper-case variable name"},
      "additionalProperties": {"type": "string"}
    },
    "mode": {"type": "string", "deprecated": true, "description": "the file is always 0600"}
  }
}`

// Describe names the type and declares its schema.
func (Plugin) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "kvfile", Version: "0.1.0", ConfigSchema: Schema}, nil
}

// Validate checks what the schema cannot: no value holds a line break.
// It runs even for a config the schema refuses, so it checks its types.
func (Plugin) Validate(_ context.Context, req *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	var diags []sdk.Diagnostic
	for _, field := range []string{"entries", "secret_entries"} {
		entries, _ := req.Config[field].(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(entries)) {
			if v, ok := entries[k].(string); ok && strings.ContainsAny(v, "\r\n") {
				diags = append(diags, sdk.Diagnostic{Field: field + "." + k, Message: "must be one line"})
			}
		}
	}
	return &sdk.ValidateResponse{Diagnostics: diags}, nil
}

// state is what the component's state directory keeps between jobs.
type state struct {
	Path    string            `json:"path"`
	Entries map[string]string `json:"entries"`
}

const stateFile = "kvfile.json"

// planFile is the file a plan saves in its plan directory.
const planFile = "file.env"

func readState(job sdk.JobContext) (state, error) {
	var st state
	b, err := os.ReadFile(filepath.Join(job.StateDir, stateFile))
	if errors.Is(err, fs.ErrNotExist) || job.StateDir == "" {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

func writeState(job sdk.JobContext, st state) error {
	if job.StateDir == "" {
		return nil
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(job.StateDir, stateFile), b, 0o600)
}

// desired reads the config's path and entries.
func desired(config map[string]any) (string, map[string]string) {
	path, _ := config["path"].(string)
	out := map[string]string{}
	for _, field := range []string{"entries", "secret_entries"} {
		entries, _ := config[field].(map[string]any)
		for k, v := range entries {
			out[k], _ = v.(string)
		}
	}
	return path, out
}

// render is the file's content for entries: sorted KEY=value lines.
func render(entries map[string]string) []byte {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(entries)) {
		fmt.Fprintf(&b, "%s=%s\n", k, entries[k])
	}
	return []byte(b.String())
}

// parse reads a file's KEY=value lines; a missing file has none.
func parse(path string) (map[string]string, bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			out[k] = v
		}
	}
	return out, true, nil
}

// changes lists one planned change per key that differs between have and
// want, in key order, so the same state plans the same digest.
func changes(have, want map[string]string) []sdk.PlannedChange {
	keys := slices.Sorted(maps.Keys(maps.Collect(func(yield func(string, bool) bool) {
		for k := range have {
			yield(k, true)
		}
		for k := range want {
			yield(k, true)
		}
	})))
	var out []sdk.PlannedChange
	for _, k := range keys {
		h, inHave := have[k]
		w, inWant := want[k]
		switch {
		case !inHave:
			out = append(out, sdk.PlannedChange{Address: k, Action: sdk.ActionCreate, After: map[string]any{"value": w}, Summary: "set " + k})
		case !inWant:
			out = append(out, sdk.PlannedChange{Address: k, Action: sdk.ActionDelete, Before: map[string]any{"value": h}, Summary: "remove " + k})
		case h != w:
			out = append(out, sdk.PlannedChange{Address: k, Action: sdk.ActionUpdate, Before: map[string]any{"value": h}, After: map[string]any{"value": w}, Summary: "change " + k})
		}
	}
	return out
}

// Plan says what Apply would change, key by key, and saves the file it
// would write in the plan directory.
func (Plugin) Plan(_ context.Context, req *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	path, want := desired(req.Config)
	have, _, err := parse(path)
	if err != nil {
		return nil, err
	}
	if req.Job.PlanDir != "" {
		if err := os.WriteFile(filepath.Join(req.Job.PlanDir, planFile), render(want), 0o600); err != nil {
			return nil, err
		}
	}
	cs := changes(have, want)
	return &sdk.PlanResponse{Changes: fmt.Sprintf("%d keys to change in %s", len(cs), path), PlannedChanges: cs}, nil
}

// Apply writes the file: the approved plan's saved file when an operator
// approved one, else the config's entries.
func (Plugin) Apply(_ context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	path, want := desired(req.Config)
	content := render(want)
	if req.Job.ApprovedPlanDigest != "" && req.Job.PlanDir != "" {
		b, err := os.ReadFile(filepath.Join(req.Job.PlanDir, planFile))
		if err != nil {
			return nil, fmt.Errorf("the approved plan's file: %w", err)
		}
		content = b
		req.Log.System("applying the approved plan " + req.Job.ApprovedPlanDigest)
	}
	tmp := path + ".byoc-tmp"
	if err := os.WriteFile(tmp, content, 0o600); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, err
	}
	applied, _, err := parse(path)
	if err != nil {
		return nil, err
	}
	req.Log.Stdout(fmt.Sprintf("wrote %d keys to %s", len(applied), path))
	return &sdk.ApplyResponse{Outputs: map[string]string{"path": path}}, writeState(req.Job, state{Path: path, Entries: applied})
}

// Drift compares the file with what the last apply wrote.
func (Plugin) Drift(_ context.Context, req *sdk.DriftRequest) (*sdk.DriftResponse, error) {
	st, err := readState(req.Job)
	if err != nil || st.Path == "" {
		return &sdk.DriftResponse{}, err
	}
	have, _, err := parse(st.Path)
	if err != nil {
		return nil, err
	}
	cs := changes(st.Entries, have)
	return &sdk.DriftResponse{Drifted: len(cs) > 0, PlannedChanges: cs, Changes: fmt.Sprintf("%d keys changed outside byoc", len(cs))}, nil
}

// PlanDestroy lists the keys Destroy would remove with the file.
func (Plugin) PlanDestroy(_ context.Context, req *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	path, _ := desired(req.Config)
	if st, err := readState(req.Job); err != nil {
		return nil, err
	} else if st.Path != "" {
		path = st.Path
	}
	have, _, err := parse(path)
	if err != nil {
		return nil, err
	}
	cs := changes(have, nil)
	return &sdk.PlanResponse{Changes: "remove " + path, PlannedChanges: cs}, nil
}

// Destroy removes the file and forgets it.
func (Plugin) Destroy(_ context.Context, req *sdk.DestroyRequest) (*sdk.DestroyResponse, error) {
	path, _ := desired(req.Config)
	if st, err := readState(req.Job); err != nil {
		return nil, err
	} else if st.Path != "" {
		path = st.Path
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	req.Log.System("removed " + path)
	return &sdk.DestroyResponse{}, writeState(req.Job, state{})
}

// Import adopts the existing file req.ID (an absolute path, the config's
// path) as the component: it keeps the file's entries as the state, as
// if an apply had written them, and changes nothing.
func (Plugin) Import(_ context.Context, req *sdk.ImportRequest) (*sdk.ImportResponse, error) {
	path, want := desired(req.Config)
	switch {
	case !filepath.IsAbs(req.ID):
		return nil, fmt.Errorf("import id %q: want the absolute path of the file", req.ID)
	case filepath.Clean(req.ID) != filepath.Clean(path):
		return nil, fmt.Errorf("import id %q is not the config's path %q", req.ID, path)
	}
	have, exists, err := parse(path)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, fmt.Errorf("import %s: no such file", path)
	}
	cs := changes(have, want)
	req.Log.Stdout(fmt.Sprintf("imported %s: %d keys, %d differ from the config", path, len(have), len(cs)))
	return &sdk.ImportResponse{Outputs: map[string]string{"path": path}}, writeState(req.Job, state{Path: path, Entries: have})
}
