package agent

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Each type sees its component's state directory writable, the install
// registry's layout writable only when it syncs into it, the provider
// mirror read-only, the kubeconfig only for helm (hidden from the
// others), and the customer's extra paths; nothing else of the agent's.
func TestSandboxPaths(t *testing.T) {
	root := t.TempDir()
	reg := filepath.Join(root, "state", "registry")
	r := &PluginRunner{
		InstallRegistry: "oci:" + reg,
		PluginEnv:       map[string]string{"BYOC_TERRAFORM_PROVIDERS": "/mirror"},
		Kubeconfig:      "/kube/config",
		SandboxReadOnly: []string{"/charts"},
		SandboxWritable: []string{"/out"},
		SandboxHidden:   []string{"/etc/byoc"},
	}
	state := filepath.Join(root, "state", "components", "c")
	tests := []struct {
		typ          string
		writable, ro []string
	}{
		{"image", []string{state, reg, "/out"}, []string{"/mirror", "/charts"}},
		{"terraform", []string{state, "/out"}, []string{reg, "/mirror", "/charts"}},
		{"helm", []string{state, "/out"}, []string{reg, "/mirror", "/kube/config", "/charts"}},
		{"action", []string{state, "/out"}, []string{reg, "/mirror", "/charts"}},
		{"thirdparty", []string{state, "/out"}, []string{reg, "/mirror", "/charts"}},
	}
	for _, tt := range tests {
		w, ro, hidden := r.sandboxPaths(tt.typ, state)
		if !slices.Equal(w, tt.writable) || !slices.Equal(ro, tt.ro) {
			t.Errorf("%s: writable %v, read-only %v; want %v, %v", tt.typ, w, ro, tt.writable, tt.ro)
		}
		wantHidden := []string{"/etc/byoc"}
		if tt.typ != "helm" {
			wantHidden = append(wantHidden, "/kube/config")
		}
		if !slices.Equal(hidden, wantHidden) {
			t.Errorf("%s: hidden %v, want %v", tt.typ, hidden, wantHidden)
		}
	}
	if _, err := os.Stat(reg); err != nil {
		t.Errorf("the registry layout dir is not created for binding: %v", err)
	}
	if w, ro, h := (&PluginRunner{}).sandboxPaths("action", ""); len(w)+len(ro)+len(h) != 0 {
		t.Errorf("a runner with nothing configured gives %v, %v, %v", w, ro, h)
	}
}
