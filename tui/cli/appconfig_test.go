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
	// -o json: camelCase field names, as every -o json (issue 33, item 10).
	r = mustRun(t, "app", "validate", "-o", "json", dir)
	var valid map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &valid); err != nil || valid["valid"] != true || valid["deployWaves"] == nil {
		t.Errorf("validate -o json: %v\n%s", err, r.stdout)
	}
	for k := range valid {
		if strings.Contains(k, "_") {
			t.Errorf("validate -o json: field %q is not camelCase", k)
		}
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

// byoc app validate checks component config against the built-in types'
// schemas, and against third-party types' given with --plugin-schema.
func TestAppValidateSchemas(t *testing.T) {
	t.Setenv("BYOC_CONFIG", filepath.Join(t.TempDir(), "config.json"))
	dir := t.TempDir()
	write := func(p, content string) {
		t.Helper()
		os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("app.toml", "name = \"shop\"\n")
	write("inputs.toml", "[[input]]\nname = \"size\"\ntype = \"number\"\ndefault = 1\n")
	write("components/job.toml", "type = \"action\"\n[[config.steps]]\nscrpt = \"make\"\n")
	write("components/hello.toml", "type = \"greeting\"\nconfig.size = \"{{ .inputs.size }}\"\n")
	describe := filepath.Join(t.TempDir(), "greeting.json")
	os.WriteFile(describe, []byte(`{"type": "greeting", "version": "0.1.0", "protocol": "1.1",
	  "config_schema": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}, "size": {"type": "integer"}}}}`), 0o644)

	r := byoc(t, "app", "validate", dir)
	want := []string{
		"error: 2 problems in app config:",
		`components/hello.toml:1: type: no component type "greeting" (known types: action, helm, image, terraform; pass a third-party type's describe output with --plugin-schema FILE)`,
		`components/job.toml:3: config.steps[0].scrpt: unknown field (did you mean "script"?)`,
	}
	if r.code != exitError || r.stderr != strings.Join(want, "\n  ")+"\n" {
		t.Errorf("exit %d, stderr:\n%s\nwant:\n%s", r.code, r.stderr, strings.Join(want, "\n  "))
	}
	// With the type's schema, its config is checked too; the reference
	// passes where a number is wanted.
	r = byoc(t, "app", "validate", "--plugin-schema", describe, dir)
	want = []string{
		"error: 2 problems in app config:",
		`components/hello.toml:2: config.name: is required`,
		`components/job.toml:3: config.steps[0].scrpt: unknown field (did you mean "script"?)`,
	}
	if r.code != exitError || r.stderr != strings.Join(want, "\n  ")+"\n" {
		t.Errorf("exit %d, stderr:\n%s\nwant:\n%s", r.code, r.stderr, strings.Join(want, "\n  "))
	}
	write("components/job.toml", "type = \"action\"\n[[config.steps]]\nscript = \"make\"\n")
	write("components/hello.toml", "type = \"greeting\"\nconfig.name = \"x\"\nconfig.size = \"{{ .inputs.size }}\"\n")
	mustRun(t, "app", "validate", "--plugin-schema", describe, dir)

	// An install's override is checked merged over the component's
	// config, against the type's schema, at the override's line; what
	// only the component's own config gets wrong is reported there once.
	write("installs/acme.toml", "[components.hello.config]\nsize = \"big\"\n[components.job.config]\nstepz = []\n")
	r = byoc(t, "app", "validate", "--plugin-schema", describe, dir)
	want = []string{
		"error: 2 problems in app config:",
		`installs/acme.toml:2: components.hello.config.size: got string, want integer`,
		`installs/acme.toml:4: components.job.config.stepz: unknown field (did you mean "steps"?)`,
	}
	if r.code != exitError || r.stderr != strings.Join(want, "\n  ")+"\n" {
		t.Errorf("overrides: exit %d, stderr:\n%s\nwant:\n%s", r.code, r.stderr, strings.Join(want, "\n  "))
	}
	write("installs/acme.toml", "[components.hello.config]\nsize = 3\n")
	mustRun(t, "app", "validate", "--plugin-schema", describe, dir)

	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"type": "action", "version": "1", "protocol": "1.1"}`), 0o644)
	if r := byoc(t, "app", "validate", "--plugin-schema", bad, dir); r.code != exitUsage || !strings.Contains(r.stderr, `"action" is a built-in type`) {
		t.Errorf("built-in --plugin-schema: exit %d, %s", r.code, r.stderr)
	}
	os.WriteFile(bad, []byte(`{"type": "g", "version": "1", "protocol": "1.1", "config_schema": {"if": {}}}`), 0o644)
	if r := byoc(t, "app", "validate", "--plugin-schema", bad, dir); r.code != exitUsage || !strings.Contains(r.stderr, `config_schema: schema at the root: keyword "if" is not supported`) {
		t.Errorf("bad --plugin-schema: exit %d, %s", r.code, r.stderr)
	}
	// plugin register checks the file before it connects anywhere.
	if r := byoc(t, "plugin", "register", bad); r.code != exitError || !strings.Contains(r.stderr, `keyword "if" is not supported`) {
		t.Errorf("plugin register of a bad file: exit %d, %s", r.code, r.stderr)
	}
	// A deprecated field is a warning: said, and the config is valid
	// (issue 29 item 7: diagnostics had no severity).
	write("installs/acme.toml", "# no overrides\n") // its size = 3 is no string
	dep := filepath.Join(t.TempDir(), "dep.json")
	os.WriteFile(dep, []byte(`{"type": "greeting", "version": "1", "protocol": "1.1", "config_schema": {"type": "object",
	  "properties": {"name": {"type": "string"}, "size": {"type": "string", "deprecated": true, "description": "set replicas instead"}}}}`), 0o644)
	if r := byoc(t, "app", "validate", "--plugin-schema", dep, dir); r.code != 0 ||
		!strings.Contains(r.stderr, "warning: components/hello.toml:3: config.size: is deprecated (set replicas instead)") {
		t.Errorf("deprecated field: exit %d, stderr %q", r.code, r.stderr)
	}
	// A schema declaring a key the agent takes out of every config
	// (issue 29: "sensitive" became "***" at run time) is refused by
	// both, naming the key.
	os.WriteFile(bad, []byte(`{"type": "g", "version": "1", "protocol": "1.1", "config_schema": {"type": "object", "properties": {"sensitive": {"type": "boolean"}}}}`), 0o644)
	const reserved = `config_schema: properties: "sensitive" is a reserved config key`
	if r := byoc(t, "app", "validate", "--plugin-schema", bad, dir); r.code != exitUsage || !strings.Contains(r.stderr, reserved) {
		t.Errorf("--plugin-schema with a reserved key: exit %d, %s", r.code, r.stderr)
	}
	if r := byoc(t, "plugin", "register", bad); r.code != exitError || !strings.Contains(r.stderr, reserved) {
		t.Errorf("plugin register with a reserved key: exit %d, %s", r.code, r.stderr)
	}
}

// TestAppInitCloud: --cloud writes the example for one cloud, which
// validates; unknown clouds are usage errors.
func TestAppInitCloud(t *testing.T) {
	t.Setenv("BYOC_CONFIG", filepath.Join(t.TempDir(), "config.json"))
	for cloud, want := range map[string]struct{ has, hasNot string }{
		"aws":   {"policies = ", "_roles"},
		"azure": {"azure_roles = ", "policies = "},
		"gcp":   {"gcp_roles = ", "policies = "},
	} {
		dir := filepath.Join(t.TempDir(), cloud)
		mustRun(t, "app", "init", dir, "--cloud", cloud)
		perms, _ := os.ReadFile(filepath.Join(dir, "permissions.toml"))
		appTOML, _ := os.ReadFile(filepath.Join(dir, "app.toml"))
		if !strings.Contains(string(perms), want.has) || strings.Contains(string(perms), want.hasNot) || !strings.Contains(string(appTOML), `clouds = ["`+cloud+`"]`) {
			t.Errorf("--cloud %s:\n%s\n%s", cloud, appTOML, perms)
		}
		if r := mustRun(t, "app", "validate", dir); !strings.Contains(r.stdout, "is valid") {
			t.Errorf("--cloud %s: validate:\n%s", cloud, r.stdout)
		}
	}
	for _, c := range []string{"ibm"} {
		if r := byoc(t, "app", "init", filepath.Join(t.TempDir(), c), "--cloud", c); r.code != exitUsage || !strings.Contains(r.stderr, "--cloud") {
			t.Errorf("--cloud %s: exit %d, stderr %q", c, r.code, r.stderr)
		}
	}
}
