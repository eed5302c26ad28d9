package agent

import (
	"path/filepath"
	"slices"
	"testing"
)

// The collector is told the agent's own paths: its state directory and
// everything the plugins' sandbox hides (the secrets file among them).
func TestTelemetryHiddenPaths(t *testing.T) {
	state := t.TempDir()
	secrets := filepath.Join(t.TempDir(), "secrets.env")
	got := telemetryHidden(Config{StateDir: state, Runner: &PluginRunner{SandboxHidden: []string{secrets}}})
	if !slices.Contains(got, state) || !slices.Contains(got, secrets) {
		t.Fatalf("hidden %q, want the state directory and the secrets file", got)
	}
}
