package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// -o yaml, name, jsonpath and go-template render the object -o json
// prints, on every command that has -o json (issue 33, item 11).
func TestOutputFormats(t *testing.T) {
	setup(t)

	// yaml: the same object as json, key for key.
	for _, args := range [][]string{{"app", "list"}, {"app", "get", "shop"}, {"job", "list"}, {"whoami"}} {
		js := mustRun(t, append(args, "-o", "json")...)
		ys := mustRun(t, append(args, "-o", "yaml")...)
		var fromJSON, fromYAML any
		if err := json.Unmarshal([]byte(js.stdout), &fromJSON); err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal([]byte(ys.stdout), &fromYAML); err != nil {
			t.Fatalf("%v -o yaml: %v\n%s", args, err, ys.stdout)
		}
		a, _ := json.Marshal(fromJSON)
		b, _ := json.Marshal(fromYAML)
		if string(a) != string(b) {
			t.Errorf("%v: -o yaml is not -o json:\n%s\n%s", args, js.stdout, ys.stdout)
		}
	}
	if r := mustRun(t, "job", "list", "-o", "yaml"); !strings.Contains(r.stdout, "state: failed") || !strings.Contains(r.stdout, "installId: ins_1") {
		t.Errorf("job list -o yaml:\n%s", r.stdout)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"app", "list", "-o", "name"}, "app/shop\napp/blog\n"},
		{[]string{"app", "get", "shop", "-o", "name"}, "app/shop\n"},
		{[]string{"job", "list", "-o", "name"}, "job/job_2\njob/job_1\n"},
		{[]string{"app", "list", "-o", "jsonpath={[*].name}"}, "shop blog"},
		{[]string{"app", "list", "-o", `jsonpath={range [*]}{.name}{"\t"}{.id}{"\n"}{end}`}, "shop\tapp_1\nblog\tapp_2\n"},
		{[]string{"app", "get", "shop", "-o", "jsonpath=.id"}, "app_1"},
		{[]string{"job", "list", "-o", "jsonpath={[1].exitCode}"}, "4"},
		{[]string{"app", "list", "-o", `go-template={{range .}}{{.name}} {{end}}`}, "shop blog "},
		{[]string{"job", "list", "-o", `go-template={{range .}}{{.id}}={{.exitCode}} {{end}}`}, "job_2=0 job_1=4 "},
	} {
		r := mustRun(t, tc.args...)
		if r.stdout != tc.want {
			t.Errorf("byoc %s = %q, want %q", strings.Join(tc.args, " "), r.stdout, tc.want)
		}
	}

	file := filepath.Join(t.TempDir(), "t.tmpl")
	if err := os.WriteFile(file, []byte("{{.name}}: {{.description}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := mustRun(t, "app", "get", "shop", "-o", "go-template-file="+file); r.stdout != "shop: the shop\n" {
		t.Errorf("go-template-file: %q", r.stdout)
	}

	// Mistakes are usage errors that say what is wrong.
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"app", "list", "-o", "xml"}, 2, `not "xml"`},
		{[]string{"app", "list", "-o", "jsonpath={.name"}, 2, "--output jsonpath: unclosed action"},
		{[]string{"app", "list", "-o", "go-template={{.name"}, 2, "--output go-template:"},
		{[]string{"app", "list", "-o", "jsonpath="}, 2, "needs an expression"},
		{[]string{"app", "list", "-o", "go-template-file=/nonexistent"}, 2, "/nonexistent"},
		{[]string{"app", "get", "shop", "-o", "go-template={{.name.x}}"}, 1, "--output go-template:"},
	} {
		r := byoc(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("byoc %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.code, tc.msg)
		}
	}

	// Under -o yaml an error is a YAML object, as it is JSON under -o json.
	r := byoc(t, "app", "get", "nope", "-o", "yaml")
	var e map[string]any
	if err := yaml.Unmarshal([]byte(r.stderr), &e); err != nil || r.code != 1 || e["exitCode"] != float64(1) || !strings.Contains(e["error"].(string), `"nope" not found`) {
		t.Errorf("app get nope -o yaml: exit %d, stderr %q (%v)", r.code, r.stderr, err)
	}
}
