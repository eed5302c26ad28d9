// Package localfile is the localfile component type: one file with a
// given content and mode.
//
// It keeps the path it manages in the component's state directory
// (sdk.JobContext.StateDir, kept by the agent across jobs), so that an
// apply that moves the file removes the old one and a destroy removes
// what was applied even if the config changed since. The job's work
// directory would not do: the agent deletes it when each job ends.
package localfile

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/byoc-dev/byoc/plugins/sdk"
)

// Version is the plugin's version.
const Version = "0.1.0"

const configSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["path", "content"],
  "additionalProperties": false,
  "properties": {
    "path": {"type": "string", "pattern": "^/", "description": "absolute path of the file"},
    "content": {"type": "string"},
    "mode": {"type": "string", "pattern": "^0?[0-7]{3}$", "default": "0644"}
  }
}`

const outputsSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string"},
    "sha256": {"type": "string"}
  }
}`

// Plugin implements the localfile type. It has every optional capability.
type Plugin struct{}

var (
	_ sdk.Plugin                = Plugin{}
	_ sdk.Destroyer             = Plugin{}
	_ sdk.Drifter               = Plugin{}
	_ sdk.OutputsSchemaProvider = Plugin{}
)

// New returns the plugin.
func New() Plugin { return Plugin{} }

// Describe names the type and declares its config schema, which the SDK
// enforces before any other method sees a config.
func (Plugin) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "localfile", Version: Version, ConfigSchema: configSchema}, nil
}

// OutputsSchema declares what Apply returns.
func (Plugin) OutputsSchema(context.Context, *sdk.OutputsSchemaRequest) (*sdk.OutputsSchemaResponse, error) {
	return &sdk.OutputsSchemaResponse{Schema: outputsSchema}, nil
}

// Validate checks what the schema cannot say.
func (Plugin) Validate(_ context.Context, req *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	var diags []sdk.Diagnostic
	if p, _ := req.Config["path"].(string); filepath.Clean(p) != p {
		diags = append(diags, sdk.Diagnostic{Field: "path", Message: fmt.Sprintf("must be a clean path (%s)", filepath.Clean(p))})
	}
	return &sdk.ValidateResponse{Diagnostics: diags}, nil
}

type config struct {
	path    string
	content []byte
	mode    fs.FileMode
}

// parse reads a config the schema has accepted.
func parse(m map[string]any) config {
	c := config{path: m["path"].(string), content: []byte(m["content"].(string)), mode: 0o644}
	if s, ok := m["mode"].(string); ok {
		n, _ := strconv.ParseUint(s, 8, 32)
		c.mode = fs.FileMode(n)
	}
	return c
}

// stateFile is the file in the component's state directory that names the
// path this component manages.
const stateFile = "localfile.json"

// managed is what the state file holds.
type managed struct {
	Path string `json:"path"`
}

// readState returns the path the component's last apply wrote, "" if
// none (or no state directory: an agent of protocol 1.1).
func readState(job sdk.JobContext) (string, error) {
	if job.StateDir == "" {
		return "", nil
	}
	b, err := os.ReadFile(filepath.Join(job.StateDir, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read state: %w", err)
	}
	var m managed
	if err := json.Unmarshal(b, &m); err != nil {
		return "", fmt.Errorf("read state %s: %w", stateFile, err)
	}
	return m.Path, nil
}

// writeState records path as the one the component manages; an empty
// path removes the record.
func writeState(job sdk.JobContext, path string) error {
	if job.StateDir == "" {
		return nil
	}
	file := filepath.Join(job.StateDir, stateFile)
	if path == "" {
		if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("clear state: %w", err)
		}
		return nil
	}
	b, _ := json.Marshal(managed{Path: path})
	return writeAtomic(config{path: file, content: b, mode: 0o600})
}

// diff says how the file differs from c, or "" if it does not.
func diff(c config) (string, error) {
	fi, err := os.Stat(c.path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Sprintf("create %s (%d bytes, mode %04o)", c.path, len(c.content), c.mode), nil
	}
	if err != nil {
		return "", err
	}
	got, err := os.ReadFile(c.path)
	if err != nil {
		return "", err
	}
	var what []string
	if !bytes.Equal(got, c.content) {
		what = append(what, fmt.Sprintf("content (%d bytes, want %d)", len(got), len(c.content)))
	}
	if fi.Mode().Perm() != c.mode {
		what = append(what, fmt.Sprintf("mode (%04o, want %04o)", fi.Mode().Perm(), c.mode))
	}
	if len(what) == 0 {
		return "", nil
	}
	return fmt.Sprintf("update %s: %v", c.path, what), nil
}

// Plan says what Apply would do.
func (Plugin) Plan(_ context.Context, req *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	c := parse(req.Config)
	d, err := diff(c)
	if err != nil {
		return nil, err
	}
	old, err := readState(req.Job)
	if err != nil {
		return nil, err
	}
	var planned []sdk.PlannedChange
	if d != "" {
		ch := sdk.PlannedChange{Address: c.path, Action: sdk.ActionUpdate, After: fileValues(c.content, c.mode), Summary: d}
		if before, ok := current(c.path); ok {
			ch.Before = before
		} else {
			ch.Action = sdk.ActionCreate
		}
		planned = append(planned, ch)
	}
	if old != "" && old != c.path {
		d = strings.TrimPrefix(d+"; ", "; ") + "remove " + old + " (the old path)"
		ch := sdk.PlannedChange{Address: old, Action: sdk.ActionDelete, Summary: "the old path"}
		ch.Before, _ = current(old)
		planned = append(planned, ch)
	}
	if d == "" {
		d = "no changes: " + c.path + " is up to date"
	}
	// The plan's artifact (protocol 1.3): the content the plan is about,
	// which an approved apply writes, whatever the config says by then.
	if req.Job.PlanDir != "" {
		if err := os.WriteFile(filepath.Join(req.Job.PlanDir, savedContent), c.content, 0o600); err != nil {
			return nil, fmt.Errorf("save the plan: %w", err)
		}
	}
	return &sdk.PlanResponse{Changes: d, PlannedChanges: planned}, nil
}

// savedContent is the plan artifact's file in JobContext.PlanDir.
const savedContent = "content"

// fileValues is what a planned change shows of a file: its size, mode and
// digest, not its content.
func fileValues(content []byte, mode fs.FileMode) map[string]any {
	sum := sha256.Sum256(content)
	return map[string]any{"size": float64(len(content)), "mode": fmt.Sprintf("%04o", mode), "sha256": hex.EncodeToString(sum[:])}
}

// current is fileValues of the file at path, if there is one.
func current(path string) (map[string]any, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	return fileValues(b, fi.Mode().Perm()), true
}

// Apply writes the file atomically: a crash leaves the old file or the
// new one, never half of one.
func (Plugin) Apply(_ context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	c := parse(req.Config)
	if req.Job.ApprovedPlanDigest != "" && req.Job.PlanDir != "" {
		// An operator approved a plan (the agent checked that a fresh
		// plan is the same): write exactly the content it saved.
		b, err := os.ReadFile(filepath.Join(req.Job.PlanDir, savedContent))
		if err != nil {
			return nil, fmt.Errorf("read the approved plan %s: %w", req.Job.ApprovedPlanDigest, err)
		}
		c.content = b
		req.Log.System("applying the approved plan " + req.Job.ApprovedPlanDigest)
	}
	d, err := diff(c)
	if err != nil {
		return nil, err
	}
	if d == "" {
		req.Log.System(c.path + " is up to date")
	} else {
		req.Log.System(d)
		if err := writeAtomic(c); err != nil {
			return nil, err
		}
	}
	old, err := readState(req.Job)
	if err != nil {
		return nil, err
	}
	if old != "" && old != c.path {
		if err := removeFile(old, req.Log); err != nil {
			return nil, err
		}
	}
	if req.Job.StateDir == "" {
		req.Log.System("no state directory (an agent of protocol 1.1): a later change of path leaves " + c.path + " behind")
	}
	if err := writeState(req.Job, c.path); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(c.content)
	return &sdk.ApplyResponse{Outputs: map[string]string{"path": c.path, "sha256": hex.EncodeToString(sum[:])}}, nil
}

func writeAtomic(c config) error {
	if err := os.MkdirAll(filepath.Dir(c.path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(c.path), ".localfile-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(c.content); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(c.mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), c.path)
}

// Drift reports whether the file still matches its config, and the change
// an apply would make to repair it.
func (Plugin) Drift(_ context.Context, req *sdk.DriftRequest) (*sdk.DriftResponse, error) {
	c := parse(req.Config)
	d, err := diff(c)
	if err != nil {
		return nil, err
	}
	if d == "" {
		return &sdk.DriftResponse{}, nil
	}
	req.Log.System("drifted: " + d)
	ch := sdk.PlannedChange{Address: c.path, Action: sdk.ActionUpdate, After: fileValues(c.content, c.mode), Summary: d}
	if before, ok := current(c.path); ok {
		ch.Before = before
	} else {
		ch.Action = sdk.ActionCreate
	}
	return &sdk.DriftResponse{Drifted: true, Changes: d, PlannedChanges: []sdk.PlannedChange{ch}}, nil
}

// PlanDestroy says what Destroy would remove: the file the component's
// last apply wrote (else the config's), or nothing when it is gone. With
// approval required, an operator approves this before a deprovision.
func (Plugin) PlanDestroy(_ context.Context, req *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	path, err := readState(req.Job)
	if err != nil {
		return nil, err
	}
	if path == "" {
		path = parse(req.Config).path
	}
	before, ok := current(path)
	if !ok {
		return &sdk.PlanResponse{Changes: path + " is already gone"}, nil
	}
	return &sdk.PlanResponse{Changes: "remove " + path, PlannedChanges: []sdk.PlannedChange{{
		Address: path, Action: sdk.ActionDelete, Before: before, Summary: "remove " + path}}}, nil
}

// Destroy removes the file the component's last apply wrote (else the
// config's) and forgets it; a file already gone is not an error.
func (Plugin) Destroy(_ context.Context, req *sdk.DestroyRequest) (*sdk.DestroyResponse, error) {
	path, err := readState(req.Job)
	if err != nil {
		return nil, err
	}
	if path == "" {
		path = parse(req.Config).path
	}
	if err := removeFile(path, req.Log); err != nil {
		return nil, err
	}
	return &sdk.DestroyResponse{}, writeState(req.Job, "")
}

// removeFile removes path; a file already gone is not an error.
func removeFile(path string, log sdk.Logger) error {
	err := os.Remove(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		log.System(path + " is already gone")
	case err != nil:
		return err
	default:
		log.System("removed " + path)
	}
	return nil
}
