// Package localfile is the localfile component type: one file with a
// given content and mode.
package localfile

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

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
	if d == "" {
		d = "no changes: " + c.path + " is up to date"
	}
	req.Log.System(d)
	return &sdk.PlanResponse{Changes: d}, nil
}

// Apply writes the file atomically: a crash leaves the old file or the
// new one, never half of one.
func (Plugin) Apply(_ context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	c := parse(req.Config)
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

// Drift reports whether the file still matches its config.
func (Plugin) Drift(_ context.Context, req *sdk.DriftRequest) (*sdk.DriftResponse, error) {
	d, err := diff(parse(req.Config))
	if err != nil {
		return nil, err
	}
	if d != "" {
		req.Log.System("drifted: " + d)
	}
	return &sdk.DriftResponse{Drifted: d != "", Changes: d}, nil
}

// Destroy removes the file; a file already gone is not an error.
func (Plugin) Destroy(_ context.Context, req *sdk.DestroyRequest) (*sdk.DestroyResponse, error) {
	c := parse(req.Config)
	err := os.Remove(c.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		req.Log.System(c.path + " is already gone")
	case err != nil:
		return nil, err
	default:
		req.Log.System("removed " + c.path)
	}
	return &sdk.DestroyResponse{}, nil
}
