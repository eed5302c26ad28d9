package cli

import (
	"strings"
	"testing"
)

// --sort-by orders a list's rows by a field of its -o json objects, in
// every format; a path naming no field says which there are (issue 33,
// item 11).
func TestSortBy(t *testing.T) {
	setup(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"app", "list", "-o", "name"}, "app/shop\napp/blog\n"}, // the server's order
		{[]string{"app", "list", "--sort-by", ".name", "-o", "name"}, "app/blog\napp/shop\n"},
		{[]string{"app", "list", "--sort-by", "{.id}", "-o", "name"}, "app/shop\napp/blog\n"},
		{[]string{"job", "list", "--sort-by", ".exitCode", "-o", "name"}, "job/job_2\njob/job_1\n"},
		{[]string{"job", "list", "--sort-by", "id", "-o", "jsonpath={[*].id}"}, "job_1 job_2"},
		{[]string{"install", "list", "--sort-by", ".agent.connected", "-o", "name"}, "install/shop-beta\ninstall/shop-acme\n"},
	} {
		if r := mustRun(t, tc.args...); r.stdout != tc.want {
			t.Errorf("byoc %s = %q, want %q", strings.Join(tc.args, " "), r.stdout, tc.want)
		}
	}
	// Tables too.
	r := mustRun(t, "app", "list", "--sort-by", ".name")
	if strings.Index(r.stdout, "blog") > strings.Index(r.stdout, "shop") {
		t.Errorf("app list --sort-by .name:\n%s", r.stdout)
	}

	for _, tc := range []struct {
		args []string
		msg  []string
	}{
		{[]string{"job", "list", "--sort-by", ".createdAt"}, []string{`--sort-by ".createdAt": a job has no such field`, ".createTime", ".state", ".exitCode"}},
		{[]string{"install", "list", "--sort-by", ".agent"}, []string{"names an object", ".agent.lastSeenTime"}},
		{[]string{"install", "list", "--sort-by", ".inputs"}, []string{"no such field"}},
	} {
		r := byoc(t, tc.args...)
		if r.code != exitUsage {
			t.Errorf("byoc %s: exit %d, want 2", strings.Join(tc.args, " "), r.code)
		}
		for _, m := range tc.msg {
			if !strings.Contains(r.stderr, m) {
				t.Errorf("byoc %s: stderr lacks %q:\n%s", strings.Join(tc.args, " "), m, r.stderr)
			}
		}
	}

	// Every command listed as sortable exists and takes the flag.
	root := (&app{}).rootCommand()
	for path := range sortableCommands {
		cmd, _, err := root.Find(strings.Fields(path)[1:])
		if err != nil || cmd.CommandPath() != path || cmd.Flags().Lookup("sort-by") == nil {
			t.Errorf("%s: no such command with --sort-by (%v)", path, err)
		}
	}
}
