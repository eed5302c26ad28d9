package localfile_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/byoc-dev/byoc/plugins/examples/localfile/localfile"
	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/sdktest"
)

func fileIs(path, content string) sdktest.Check {
	return func(*sdktest.Outcome) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if string(b) != content {
			return fmt.Errorf("%s holds %q, want %q", path, b, content)
		}
		return nil
	}
}

func TestLifecycle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etc", "motd")
	v1 := map[string]any{"path": path, "content": "hello\n"}
	v2 := map[string]any{"path": path, "content": "bye\n", "mode": "0600"}
	sum := sha256.Sum256([]byte("bye\n"))

	sdktest.Test(t, localfile.New(), sdktest.Case{
		Steps: []sdktest.Step{
			{Op: sdk.OpPlan, Config: v1, Check: sdktest.All(sdktest.ExpectChanges("create "+path), sdktest.ExpectPlannedChange(sdk.ActionCreate, path))},
			{Config: v1, Check: sdktest.All(fileIs(path, "hello\n"), sdktest.ExpectOutput("path", path))},
			{Op: sdk.OpPlan, Config: v1, Check: sdktest.ExpectChanges("no changes")},
			{Op: sdk.OpDrift, Config: v1, Check: sdktest.ExpectDrifted(false)},
			{Config: v2, Check: sdktest.All(fileIs(path, "bye\n"), sdktest.ExpectOutput("sha256", hex.EncodeToString(sum[:])))},
		},
		CheckDestroy: func(*sdktest.Outcome) error {
			if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%s still exists after destroy (%v)", path, err)
			}
			return nil
		},
	})
}

func TestDrift(t *testing.T) {
	path := filepath.Join(t.TempDir(), "motd")
	cfg := map[string]any{"path": path, "content": "hello\n"}
	sdktest.Test(t, localfile.New(), sdktest.Case{Steps: []sdktest.Step{
		{Config: cfg},
		{Op: sdk.OpDrift, Config: cfg, Check: sdktest.ExpectDrifted(false)},
		{
			Name:      "edited by hand",
			PreConfig: func() error { return os.WriteFile(path, []byte("edited\n"), 0o644) },
			Op:        sdk.OpDrift, Config: cfg,
			Check: sdktest.All(sdktest.ExpectDrifted(true), sdktest.ExpectChanges("content (7 bytes, want 6)"), sdktest.ExpectPlannedChange("update", path)),
		},
		{Op: sdk.OpPlan, Config: cfg, Check: sdktest.ExpectChanges("update " + path)},
		{Name: "apply repairs", Config: cfg, Check: fileIs(path, "hello\n")},
		{Op: sdk.OpDrift, Config: cfg, Check: sdktest.ExpectDrifted(false)},
	}})
}

func TestInvalidConfig(t *testing.T) {
	sdktest.Test(t, localfile.New(), sdktest.Case{Steps: []sdktest.Step{
		{Config: map[string]any{"content": "x"}, ExpectDiagnostics: []string{"path: is required"}},
		{Config: map[string]any{"path": "etc/motd", "content": "x"}, ExpectDiagnostics: []string{"path: "}},
		{Config: map[string]any{"path": "/etc/../motd", "content": "x"}, ExpectDiagnostics: []string{"path: must be a clean path (/motd)"}},
		{Config: map[string]any{"path": "/x", "content": "x", "mode": "rw", "owner": "root"},
			ExpectDiagnostics: []string{"mode: ", "owner: unknown field"}},
	}})
}

func TestApplyFailureIsReported(t *testing.T) {
	dir := t.TempDir()
	// A directory where the file should be: apply must fail, saying why.
	path := filepath.Join(dir, "d")
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	sdktest.Test(t, localfile.New(), sdktest.Case{Steps: []sdktest.Step{
		{Config: map[string]any{"path": path, "content": "x"}, ExpectError: regexp.MustCompile("file exists|is a directory")},
	}})
}

func gone(path string) sdktest.Check {
	return func(*sdktest.Outcome) error {
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s still exists (%v)", path, err)
		}
		return nil
	}
}

// The path the component manages is kept in its state directory: an apply
// that moves the file removes the old one, and the destroy removes what
// was applied and clears the state.
func TestMovedFileAndState(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	sdktest.Test(t, localfile.New(), sdktest.Case{
		Steps: []sdktest.Step{
			{Config: map[string]any{"path": a, "content": "x"}, Check: sdktest.ExpectStateFile("localfile.json")},
			{Op: sdk.OpPlan, Config: map[string]any{"path": b, "content": "x"}, Check: sdktest.All(
				sdktest.ExpectChanges("create "+b+" (1 bytes, mode 0644); remove "+a+" (the old path)"),
				sdktest.ExpectPlannedChange(sdk.ActionCreate, b), sdktest.ExpectPlannedChange(sdk.ActionDelete, a))},
			{Config: map[string]any{"path": b, "content": "x"}, Check: sdktest.All(fileIs(b, "x"), gone(a), sdktest.ExpectLog("removed "+a))},
		},
		CheckDestroy: sdktest.All(gone(b), sdktest.ExpectNoStateFile("localfile.json")),
	})
	// An explicit destroy with another config still removes what was
	// applied.
	sdktest.Test(t, localfile.New(), sdktest.Case{
		Steps: []sdktest.Step{
			{Config: map[string]any{"path": a, "content": "x"}},
			{Op: sdk.OpDestroy, Config: map[string]any{"path": b, "content": "x"}},
		},
		CheckDestroy: sdktest.All(gone(a), sdktest.ExpectNoStateFile("localfile.json")),
	})
}

// An approved apply writes the content its plan saved; when the file
// changed after the plan, the fresh plan differs and nothing is written.
func TestApprovedPlan(t *testing.T) {
	path := filepath.Join(t.TempDir(), "motd")
	cfg := map[string]any{"path": path, "content": "hello\n"}
	sdktest.Test(t, localfile.New(), sdktest.Case{
		Steps: []sdktest.Step{
			{Op: sdk.OpPlan, Config: cfg, Check: func(o *sdktest.Outcome) error {
				b, err := os.ReadFile(filepath.Join(o.PlanDir, "content"))
				if err != nil || string(b) != "hello\n" {
					return fmt.Errorf("saved plan: %q %v", b, err)
				}
				return nil
			}},
			{ApprovedPlan: true, Config: cfg, Check: sdktest.All(fileIs(path, "hello\n"), sdktest.ExpectLog("applying the approved plan sha256:"))},
			{Op: sdk.OpPlan, Config: map[string]any{"path": path, "content": "bye\n"}},
			{PreConfig: func() error { return os.WriteFile(path, []byte("intruder\n"), 0o644) },
				ApprovedPlan: true, Config: map[string]any{"path": path, "content": "bye\n"},
				ExpectError: regexp.MustCompile("plan changed since approval"), Check: fileIs(path, "intruder\n")},
		},
	})
}

// A destroy is planned (the file it removes), and an approved destroy
// runs only while that plan still holds.
func TestApprovedDestroyPlan(t *testing.T) {
	path := filepath.Join(t.TempDir(), "motd")
	cfg := map[string]any{"path": path, "content": "hello\n"}
	sdktest.Test(t, localfile.New(), sdktest.Case{
		Steps: []sdktest.Step{
			{Config: cfg},
			{Op: sdk.OpPlanDestroy, Config: cfg, Check: sdktest.ExpectPlannedChange(sdk.ActionDelete, path)},
			{PreConfig: func() error { return os.WriteFile(path, []byte("changed\n"), 0o644) },
				Op: sdk.OpDestroy, ApprovedPlan: true, Config: cfg,
				ExpectError: regexp.MustCompile("plan changed since approval"), Check: fileIs(path, "changed\n")},
			{Op: sdk.OpPlanDestroy, Config: cfg},
			{Op: sdk.OpDestroy, ApprovedPlan: true, Config: cfg, Check: gone(path)},
		},
	})
}
