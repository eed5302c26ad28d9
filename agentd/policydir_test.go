package main

import (
	"os"
	"path/filepath"
	"testing"
)

// agentd refuses at start a --policy-dir it could not use for jobs: one
// that is missing, or holding a policy others may write.
func TestPolicyDirCheckedAtStart(t *testing.T) {
	open := t.TempDir()
	if err := os.WriteFile(filepath.Join(open, "p.rego"), []byte("package p\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(open, "p.rego"), 0o664); err != nil {
		t.Fatal(err)
	}
	for name, dir := range map[string]string{"missing": filepath.Join(t.TempDir(), "nope"), "group-writable policy": open} {
		t.Run(name, func(t *testing.T) {
			if code := run(t.Context(), []string{"--ims", "http://127.0.0.1:1", "--state-dir", t.TempDir(), "--policy-dir", dir}); code != 2 {
				t.Fatalf("exit %d, want 2", code)
			}
		})
	}
}
