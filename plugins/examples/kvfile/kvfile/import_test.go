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

// TestImport adopts a file made by hand: the plan after it shows no
// change while the file matches the config, then only what differs; a
// wrong import id is refused with its reason.
func TestImport(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.env")
	if err := os.WriteFile(path, []byte("MODE=prod\nPORT=8080\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"path": path, "entries": map[string]any{"PORT": "8080", "MODE": "prod"}}
	changed := map[string]any{"path": path, "entries": map[string]any{"PORT": "9090", "MODE": "prod"}}
	sdktest.Test(t, kvfile.Plugin{}, sdktest.Case{
		Steps: []sdktest.Step{
			{Name: "an id other than the config's path", Op: sdk.OpImport, ImportID: path + ".missing", Config: cfg,
				ExpectError: regexp.MustCompile(`is not the config's path`)},
			{Name: "import", Op: sdk.OpImport, ImportID: path, Config: cfg, Check: sdktest.All(
				sdktest.ExpectOutput("path", path), sdktest.ExpectLog("imported "+path+": 2 keys, 0 differ"),
				fileIs(path, "MODE=prod\nPORT=8080\n"))},
			{Name: "plan: no change", Op: sdk.OpPlan, Config: cfg, Check: sdktest.ExpectNoPlannedChanges()},
			{Name: "no drift", Op: sdk.OpDrift, Config: cfg, Check: sdktest.ExpectDrifted(false)},
			{Name: "plan with a changed config", Op: sdk.OpPlan, Config: changed, Check: sdktest.ExpectPlannedChange(sdk.ActionUpdate, "PORT")},
		},
		CheckDestroy: func(*sdktest.Outcome) error {
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				return fmt.Errorf("%s is still there: %v", path, err)
			}
			return nil
		},
	})
}
