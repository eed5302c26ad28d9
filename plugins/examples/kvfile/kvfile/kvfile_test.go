package kvfile_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/byoc-dev/byoc/plugins/examples/kvfile/kvfile"
	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/sdktest"
)

func fileIs(path, want string) sdktest.Check {
	return func(*sdktest.Outcome) error {
		b, err := os.ReadFile(path)
		if err != nil || string(b) != want {
			return fmt.Errorf("%s holds %q (%v), want %q", path, b, err, want)
		}
		return nil
	}
}

// TestWalkThrough is the guide's walk-through (docs/plugin-author):
// plan, apply the approved plan, drift (none, then an edit by hand), plan
// the destroy, destroy the approved plan.
func TestWalkThrough(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.env")
	cfg := map[string]any{"path": path, "entries": map[string]any{"PORT": "8080", "MODE": "prod"}}
	sdktest.Test(t, kvfile.Plugin{}, sdktest.Case{
		Steps: []sdktest.Step{
			{Name: "plan", Op: sdk.OpPlan, Config: cfg, Check: sdktest.All(
				sdktest.ExpectPlannedChange(sdk.ActionCreate, "PORT"),
				sdktest.ExpectPlannedChange(sdk.ActionCreate, "MODE"))},
			{Name: "apply the approved plan", ApprovedPlan: true, Config: cfg, Check: sdktest.All(
				fileIs(path, "MODE=prod\nPORT=8080\n"),
				sdktest.ExpectLog("applying the approved plan sha256:"))},
			{Name: "no drift", Op: sdk.OpDrift, Config: cfg, Check: sdktest.ExpectDrifted(false)},
			{Name: "drift after an edit", Op: sdk.OpDrift, Config: cfg,
				PreConfig: func() error { return os.WriteFile(path, []byte("MODE=debug\nPORT=8080\n"), 0o600) },
				Check:     sdktest.All(sdktest.ExpectDrifted(true), sdktest.ExpectPlannedChange(sdk.ActionUpdate, "MODE"))},
			{Name: "plan the destroy", Op: sdk.OpPlanDestroy, Config: cfg, Check: sdktest.All(
				sdktest.ExpectPlannedChange(sdk.ActionDelete, "MODE"),
				sdktest.ExpectPlannedChange(sdk.ActionDelete, "PORT"))},
			{Name: "destroy the approved plan", Op: sdk.OpDestroy, ApprovedPlan: true, Config: cfg},
		},
		CheckDestroy: func(*sdktest.Outcome) error {
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				return fmt.Errorf("%s is still there: %v", path, err)
			}
			return nil
		},
	})
}

// A plan approved before someone changed the file is not applied.
func TestChangedPlanIsNotApplied(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.env")
	cfg := map[string]any{"path": path, "entries": map[string]any{"PORT": "8080"}}
	sdktest.Test(t, kvfile.Plugin{}, sdktest.Case{Steps: []sdktest.Step{
		{Op: sdk.OpPlan, Config: cfg},
		{PreConfig: func() error { return os.WriteFile(path, []byte("PORT=1\n"), 0o600) },
			ApprovedPlan: true, Config: cfg, ExpectError: regexp.MustCompile("plan changed since approval"), Check: fileIs(path, "PORT=1\n")},
	}})
}

// Every problem of a config in one round: the schema's (a bad key, a
// relative path) and Validate's (a value of two lines); a deprecated
// field is a warning only.
func TestConfigProblems(t *testing.T) {
	sdktest.Test(t, kvfile.Plugin{}, sdktest.Case{Steps: []sdktest.Step{
		{Config: map[string]any{"path": "app.env", "entries": map[string]any{"port": "1", "MODE": "a\nb"}},
			ExpectDiagnostics: []string{"path: is not in the required form (absolute path of the file)",
				"entries.port: is not an allowed field name", "entries.MODE: must be one line"}},
		{Op: sdk.OpPlan, Config: map[string]any{"path": "/x/app.env", "entries": map[string]any{}, "mode": "0644"},
			Check: func(o *sdktest.Outcome) error {
				if len(o.Warnings) != 1 || o.Warnings[0].String() != "mode: is deprecated" {
					return fmt.Errorf("warnings %v", o.Warnings)
				}
				return nil
			}},
	}, SkipDestroy: true})
}
