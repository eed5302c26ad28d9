package main_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/byoc-dev/byoc/plugins/sdk"
)

// The built binary describes itself without starting the RPC server.
func TestDescribeCommand(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "byoc-plugin-localfile")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "describe").Output()
	if err != nil {
		t.Fatalf("describe: %v", err)
	}
	var d struct {
		Type             string         `json:"type"`
		Protocol         string         `json:"protocol"`
		ProtocolVersions []string       `json:"protocol_versions"`
		Capabilities     []string       `json:"capabilities"`
		ConfigSchema     map[string]any `json:"config_schema"`
		OutputsSchema    map[string]any `json:"outputs_schema"`
	}
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatalf("describe printed %s: %v", out, err)
	}
	if d.Type != "localfile" || d.Protocol != sdk.Protocol.String() || !slices.Equal(d.Capabilities, []string{"destroy", "drift", "plan_destroy", "outputs_schema"}) ||
		d.ConfigSchema["required"] == nil || d.OutputsSchema["properties"] == nil {
		t.Errorf("describe = %s", out)
	}
	// Run plainly, it is not a program for people.
	if out, err := exec.Command(bin).CombinedOutput(); err == nil {
		t.Errorf("running the plugin by hand succeeded: %s", out)
	}
}
