package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/agentd/stack"
	"github.com/byoc-dev/byoc/agentd/stack/awsfake"
)

func localStack(t *testing.T, ims string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := `{"version":1,"format":"local","install":"acme","ims":"` + ims + `","enroll_token":{"file":"enroll.token"},
 "modes":{"provision":{"enabled":true,"parameter":"EnableProvision"},"maintenance":{"enabled":false,"name":"local maintenance","parameter":"EnableMaintenance"}},
 "secrets_file":"secrets.env","secrets":{"license_key":{"file":"secrets.env"}}}`
	for name, data := range map[string]string{"stack.json": cfg, "enroll.token": "byoc_enr_tok.k\n", "secrets.env": "license_key=LK-secret-1\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "stack.json")
}

// fakeCompanion writes a stand-in for byoc-plugins that only answers
// --version, in a directory of its own, and returns its path.
func fakeCompanion(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bin")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "byoc-plugins")
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho byoc-plugins v9.9.9-test\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// tableRow returns the result and detail of check in a preflight table,
// their columns' padding squeezed to one space.
func tableRow(table, check string) string {
	for _, line := range strings.Split(table, "\n") {
		if rest, ok := strings.CutPrefix(line, check+" "); ok {
			status, detail, _ := strings.Cut(strings.TrimLeft(rest, " "), " ")
			return status + " " + strings.TrimLeft(detail, " ")
		}
	}
	return ""
}

func TestPreflightCommand(t *testing.T) {
	ims := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer ims.Close()
	companion := fakeCompanion(t)
	var out, errb bytes.Buffer
	if code := preflightCmd(context.Background(), []string{"--stack-config", localStack(t, ims.URL), "--state-dir", t.TempDir(), "--bundled-plugins", companion}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "role maintenance") || !strings.Contains(out.String(), "off") {
		t.Errorf("table:\n%s", out.String())
	}
	if row := tableRow(out.String(), "bundled plugins"); row != "pass "+companion+" (byoc-plugins v9.9.9-test)" {
		t.Errorf("no bundled plugins row that passed:\n%s", out.String())
	}

	// byoc-plugins missing, or writable by its group: the agent could
	// run no terraform, image or helm job.
	for name, setup := range map[string]func() string{
		"missing":        func() string { return filepath.Join(t.TempDir(), "byoc-plugins") },
		"group-writable": func() string { p := fakeCompanion(t); os.Chmod(p, 0o775); return p },
	} {
		path := setup()
		out.Reset()
		if code := preflightCmd(context.Background(), []string{"--stack-config", localStack(t, ims.URL), "--state-dir", t.TempDir(), "--bundled-plugins", path}, &out, &errb); code != 1 {
			t.Fatalf("%s companion: exit %d\n%s", name, code, out.String())
		}
		want := "the helm, image, terraform types are bundled in byoc-plugins, which was not found at " + path
		if name == "group-writable" {
			want = "the helm, image, terraform types are bundled in byoc-plugins: plugin " + path + " is writable by group or others"
		}
		if row := tableRow(out.String(), "bundled plugins"); !strings.HasPrefix(row, "FAIL "+want) || !strings.Contains(out.String(), "fix: install byoc-plugins") {
			t.Errorf("%s companion: table lacks %q:\n%s", name, want, out.String())
		}
	}
	// The build agent runs no bundled type.
	out.Reset()
	if code := preflightCmd(context.Background(), []string{"--stack-config", localStack(t, ims.URL), "--state-dir", t.TempDir(), "--role", "build", "--bundled-plugins", "/nonexistent/byoc-plugins"}, &out, &errb); code != 0 || strings.Contains(out.String(), "bundled plugins") {
		t.Errorf("build agent: exit %d\n%s", code, out.String())
	}

	// Nothing listens here.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	out.Reset()
	if code := preflightCmd(context.Background(), []string{"--stack-config", localStack(t, "http://"+addr), "--state-dir", t.TempDir(), "--bundled-plugins", companion}, &out, &errb); code != 1 {
		t.Fatalf("unreachable imsd: exit %d\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "FAIL") || !strings.Contains(out.String(), "fix: allow outbound HTTPS") {
		t.Errorf("table:\n%s", out.String())
	}
}

func TestSupportBundleCommand(t *testing.T) {
	ims := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer ims.Close()
	state := t.TempDir()
	if err := os.MkdirAll(filepath.Join(state, "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "logs", "j-1.log"), []byte("stdout\tthe license is LK-secret-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "bundle.tar.gz")
	var out, errb bytes.Buffer
	if code := supportBundleCmd(context.Background(), []string{"-o", file, "--stack-config", localStack(t, ims.URL), "--state-dir", state}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("bundle: %v %v", err, fi)
	}
	if !strings.Contains(out.String(), "logs/j-1.log") || !strings.Contains(out.String(), "review it") {
		t.Errorf("output:\n%s", out.String())
	}
	if code := supportBundleCmd(context.Background(), nil, &out, &errb); code != 2 {
		t.Errorf("without -o: exit %d", code)
	}
}

// bgModeARN and bgAdminARN are the roles of breakGlassStack.
const (
	bgModeARN  = "arn:aws:iam::123456789012:role/acme-BreakGlassRole"
	bgAdminARN = "arn:aws:iam::123456789012:role/acme-BreakGlassAdminRole"
)

// breakGlassStack is a CloudFormation stack whose break-glass mode has a
// role of its own (bgModeARN) and a break_glass.toml role "admin"
// (bgAdminARN), against a fake STS.
func breakGlassStack(t *testing.T) (*awsfake.AWS, *stack.Stack) {
	t.Helper()
	const key = "AKIABGTESTKEY0001"
	fake := awsfake.New(t)
	fake.AddRole(bgModeARN, key)
	fake.AddRole(bgAdminARN, key)
	t.Setenv("AWS_ACCESS_KEY_ID", key)
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	cfg := `{"version":1,"format":"cloudformation","install":"acme","ims":"https://ims.example.com","region":"eu-west-1","enroll_token":{},
 "modes":{"break_glass":{"enabled":true,"arn":"` + bgModeARN + `","name":"BreakGlassRole","parameter":"EnableBreakGlass"}},
 "break_glass_roles":{"admin":{"enabled":true,"arn":"` + bgAdminARN + `","name":"BreakGlassAdminRole","parameter":"EnableBreakGlass"}},
 "endpoints":{"sts":"` + fake.STS.URL + `","secretsmanager":"` + fake.SecretsManager.URL + `"}}`
	path := filepath.Join(t.TempDir(), "stack.json")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := stack.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return fake, st
}

// A support session's credentials are its own grant's (the live one that
// allows sessions): not the role of another live grant the customer
// approved for break-glass jobs only, even one that ends later, and they
// end with the session's grant.
func TestSupportSessionTakesItsGrantsRole(t *testing.T) {
	fake, st := breakGlassStack(t)
	state := t.TempDir()
	now := time.Now()
	if _, err := permissions.UpdateGrants(state, func(g *permissions.Grants) error {
		g.Grants = append(g.Grants,
			permissions.Grant{ID: "bg_jobs", Role: "admin", ApprovedAt: now, ExpiresAt: now.Add(time.Hour)},
			permissions.Grant{ID: "bg_shell", ApprovedAt: now, ExpiresAt: now.Add(10 * time.Minute), AllowSessions: true})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	gs, err := permissions.LoadGrants(state)
	if err != nil {
		t.Fatal(err)
	}
	g, ok := gs.LiveSessions(now)
	if !ok || g.ID != "bg_shell" {
		t.Fatalf("grant allowing sessions: %v %v", g, ok)
	}
	r := &agent.PluginRunner{WorkRoot: t.TempDir(), Credentials: stackCredentials(st, state, func() time.Time { return now }),
		Loader: &pluginhost.Loader{Sandbox: &pluginhost.Sandbox{Isolation: pluginhost.IsolationNone}}}
	cmd, cleanup, err := r.Shell(context.Background(), agent.ShellSpec{ID: "ss_abcdefgh", InstallID: "in_1", Argv: []string{"/bin/sh"},
		Term: "xterm", Grant: g.ID, Role: g.Role})
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	iss := fake.Issued()
	if len(iss) != 1 {
		t.Fatalf("%d roles assumed, want 1", len(iss))
	}
	if iss[0].RoleARN != bgModeARN || !slices.Contains(cmd.Env, "BYOC_ROLE_ARN="+bgModeARN) ||
		iss[0].Policy != stack.SessionPolicy(now.Add(10*time.Minute)) {
		t.Fatalf("session under %s got role %s, session policy %s; want %s until the session grant's end", g.ID, iss[0].RoleARN, iss[0].Policy, bgModeARN)
	}

	// Its grant revoked, another still live: no credentials at all.
	if _, err := permissions.UpdateGrants(state, func(gs *permissions.Grants) error {
		gs.Grants[1].RevokedAt, gs.Grants[1].RevokedBy = now, "alice"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Shell(context.Background(), agent.ShellSpec{ID: "ss_abcdefgi", InstallID: "in_1", Argv: []string{"/bin/sh"},
		Term: "xterm", Grant: g.ID, Role: g.Role}); err == nil || !strings.Contains(err.Error(), "bg_shell was revoked by alice") {
		t.Fatalf("session under a revoked grant: %v", err)
	}
	if n := len(fake.Issued()); n != 1 {
		t.Fatalf("under a revoked grant: %d roles assumed in all, want 1", n)
	}
}

// A break-glass job runs with its live grant's role (break_glass.toml's,
// created by the stack), for no longer than the grant; without a live
// grant, none at all.
func TestBreakGlassJobTakesItsGrantsRole(t *testing.T) {
	const (
		modeARN = bgModeARN
		adminRN = bgAdminARN
	)
	fake, st := breakGlassStack(t)
	state := t.TempDir()
	now := time.Now()
	creds := stackCredentials(st, state, func() time.Time { return now })
	job := agent.Job{ID: "job_bg", Mode: "break_glass", Timeout: time.Hour}

	// Without a live grant no role is assumed, not even the mode's own,
	// and the error says what the grants are.
	if _, _, err := creds(context.Background(), job); err == nil || !strings.Contains(err.Error(), "this install has none") {
		t.Errorf("without a grant: %v", err)
	}
	if n := len(fake.Issued()); n != 0 {
		t.Fatalf("without a grant: %d roles assumed", n)
	}
	if _, err := permissions.UpdateGrants(state, func(g *permissions.Grants) error {
		g.Grants = append(g.Grants, permissions.Grant{ID: "bg_1", Role: "admin", ApprovedAt: now, ExpiresAt: now.Add(20 * time.Minute)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	env, _, err := creds(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	is := fake.Issued()[0]
	if is.RoleARN != adminRN || env["BYOC_ROLE_ARN"] != adminRN || is.Duration > 20*time.Minute ||
		is.Policy != stack.SessionPolicy(now.Add(20*time.Minute)) {
		t.Errorf("with grant bg_1: %+v", is)
	}
	// Revoked: refused again, naming the revocation.
	if _, err := permissions.UpdateGrants(state, func(g *permissions.Grants) error {
		g.Grants[0].RevokedAt, g.Grants[0].RevokedBy = now, "alice"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := creds(context.Background(), job); err == nil || !strings.Contains(err.Error(), "revoked by alice") || len(fake.Issued()) != 1 {
		t.Errorf("revoked grant: %v (%d issued)", err, len(fake.Issued()))
	}
}
