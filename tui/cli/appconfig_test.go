package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAppInitAndValidate(t *testing.T) {
	t.Setenv("BYOC_CONFIG", filepath.Join(t.TempDir(), "config.json"))
	dir := filepath.Join(t.TempDir(), "app")
	r := mustRun(t, "app", "init", dir)
	if !strings.Contains(r.stdout, "components/api.toml") {
		t.Errorf("init did not list its files:\n%s", r.stdout)
	}
	// init never overwrites.
	if r := byoc(t, "app", "init", dir); r.code != exitError || !strings.Contains(r.stderr, "exists already") {
		t.Errorf("second init: exit %d, stderr %q", r.code, r.stderr)
	}
	r = mustRun(t, "app", "validate", dir)
	if !strings.Contains(r.stdout, "is valid") || !strings.Contains(r.stdout, "2. cache, db") {
		t.Errorf("validate output:\n%s", r.stdout)
	}

	// Break two files: both problems are reported, with file, line and key.
	api := filepath.Join(dir, "components", "api.toml")
	b, _ := os.ReadFile(api)
	os.WriteFile(api, []byte(strings.Replace(string(b), `dependencies = ["cache"]`, `dependencies = ["cahce"]`, 1)), 0o644)
	web := filepath.Join(dir, "components", "web.toml")
	b, _ = os.ReadFile(web)
	os.WriteFile(web, append([]byte("typ = \"image\"\n"), b...), 0o644)
	r = byoc(t, "app", "validate", dir)
	want := []string{
		"error: 2 problems in app config:",
		`components/api.toml:3: dependencies[0]: no component named "cahce" (did you mean "cache"?)`,
		`components/web.toml:1: typ: unknown key (did you mean "type"?)`,
	}
	if r.code != exitError || r.stderr != strings.Join(want, "\n  ")+"\n" {
		t.Errorf("exit %d, stderr:\n%s\nwant:\n%s", r.code, r.stderr, strings.Join(want, "\n  "))
	}
	r = byoc(t, "app", "validate", "-o", "json", dir)
	var out struct {
		Valid       bool
		Diagnostics []struct{ File, Key, Message, Hint string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != exitError || out.Valid || len(out.Diagnostics) != 2 {
		t.Errorf("json: exit %d, %v, %+v\n%s", r.code, err, out, r.stdout)
	}
	if r := byoc(t, "app", "validate", filepath.Join(dir, "nope")); r.code != exitError || !strings.Contains(r.stderr, "no such file") {
		t.Errorf("missing dir: exit %d, %q", r.code, r.stderr)
	}
}
