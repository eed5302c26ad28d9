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

// The vendor's telemetry declaration, which a compromised imsd writes,
// names the log files the agent reads: it may name the kubeconfig the
// agent gives the helm type, or the cloud credentials of the agent's
// machine. None of them is read as a log: the collector is told them as
// the agent's own.
func TestTelemetryHidesTheMachinesCredentials(t *testing.T) {
	home := t.TempDir()
	kube := filepath.Join(t.TempDir(), "kubeconfig")
	env := map[string]string{"AWS_SHARED_CREDENTIALS_FILE": "/etc/byoc/aws-credentials",
		"GOOGLE_APPLICATION_CREDENTIALS": "/etc/byoc/gcp.json", "KUBECONFIG": "/etc/a.yaml:/etc/b.yaml"}
	got := credentialPaths(kube, func(k string) string { return env[k] }, home)
	for _, want := range []string{kube, "/etc/byoc/aws-credentials", "/etc/byoc/gcp.json", "/etc/a.yaml", "/etc/b.yaml",
		"/var/run/secrets", filepath.Join(home, ".aws"), filepath.Join(home, ".kube")} {
		if !slices.Contains(got, want) {
			t.Errorf("hidden %q, want %s among them", got, want)
		}
	}
	all := telemetryHidden(Config{StateDir: t.TempDir(), Runner: &PluginRunner{Kubeconfig: kube}})
	if !slices.Contains(all, kube) {
		t.Fatalf("the collector's hidden paths %q lack the agent's kubeconfig %s", all, kube)
	}
}
