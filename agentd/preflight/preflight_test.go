package preflight_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/preflight"
	"github.com/byoc-dev/byoc/agentd/stack"
	"github.com/byoc-dev/byoc/agentd/stack/awsfake"
	"github.com/byoc-dev/byoc/internal/stackconfig"
)

const (
	agentKey = "AKIAAGENTKEY0002"
	provARN  = "arn:aws:iam::123456789012:role/p"
	maintARN = "arn:aws:iam::123456789012:role/m"
	tokenARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:tok"
)

func fixture(t *testing.T, skew time.Duration) (*awsfake.AWS, *stack.Stack, *httptest.Server) {
	t.Helper()
	fake := awsfake.New(t)
	fake.AddRole(provARN, agentKey)
	fake.AddRole(maintARN, agentKey)
	fake.PutSecret(tokenARN, "byoc_enr_x.k")
	t.Setenv("AWS_ACCESS_KEY_ID", agentKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	ims := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if skew != 0 {
			w.Header().Set("Date", time.Now().Add(skew).UTC().Format(http.TimeFormat))
		}
		w.Write([]byte("ok"))
	}))
	t.Cleanup(ims.Close)
	registry := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v2/" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(registry.Close)
	c := stackconfig.Config{Version: 1, Format: "cloudformation", Install: "acme", IMS: ims.URL, Region: "eu-west-1",
		EnrollToken: stackconfig.Source{SecretARN: tokenARN},
		Modes: map[string]stackconfig.Role{
			"provision":   {Enabled: true, ARN: provARN, Name: "ProvisionRole", Parameter: "EnableProvision"},
			"maintenance": {Enabled: true, ARN: maintARN, Name: "MaintenanceRole", Parameter: "EnableMaintenance"},
			"deprovision": {Enabled: true, ARN: provARN, Name: "DeprovisionRole", Parameter: "EnableDeprovision"},
			"break_glass": {Enabled: false, Name: "BreakGlassRole", Parameter: "EnableBreakGlass"},
		},
		Registry:  strings.TrimPrefix(registry.URL, "http://") + "/byoc/acme",
		Endpoints: map[string]string{"sts": fake.STS.URL, "secretsmanager": fake.SecretsManager.URL}}
	b, _ := json.Marshal(c)
	path := filepath.Join(t.TempDir(), "stack.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := stack.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return fake, st, ims
}

func byCheck(rs []preflight.Result) map[string]preflight.Result {
	m := map[string]preflight.Result{}
	for _, r := range rs {
		m[r.Check] = r
	}
	return m
}

func TestPreflightPasses(t *testing.T) {
	fake, st, _ := fixture(t, 0)
	rs := preflight.Run(context.Background(), preflight.Options{Stack: st, StateDir: t.TempDir()})
	var b bytes.Buffer
	preflight.Print(&b, rs)
	if preflight.Failed(rs) {
		t.Fatalf("preflight failed:\n%s", b.String())
	}
	m := byCheck(rs)
	for _, c := range []string{"egress to imsd", "clock skew", "role provision", "role maintenance", "role deprovision", "enrolment token", "customer inputs and secrets", "registry", "identity key files", "disk space"} {
		if m[c].Status != preflight.Pass {
			t.Errorf("%s: %+v", c, m[c])
		}
	}
	if m["role break_glass"].Status != preflight.Off || !strings.Contains(m["role break_glass"].Detail, "EnableBreakGlass=false") {
		t.Errorf("break_glass: %+v", m["role break_glass"])
	}
	// One AssumeRole per enabled mode, each its own role.
	var assumed []string
	for _, is := range fake.Issued() {
		assumed = append(assumed, is.RoleARN)
		// A role assumed only to check it gets credentials that can do
		// nothing.
		if is.Policy != stack.DenyAllPolicy {
			t.Errorf("preflight assumed %s with session policy %q, want the deny-all one", is.RoleARN, is.Policy)
		}
	}
	if strings.Join(assumed, " ") != provARN+" "+maintARN+" "+provARN {
		t.Errorf("assumed %v", assumed)
	}
	if !strings.HasSuffix(b.String(), "preflight passed\n") {
		t.Errorf("table:\n%s", b.String())
	}
}

func TestPreflightFailures(t *testing.T) {
	fake, st, ims := fixture(t, 2*time.Minute)
	fake.RemoveRole(maintARN)
	rs := preflight.Run(context.Background(), preflight.Options{Stack: st, StateDir: t.TempDir(), MinFree: 1 << 62})
	var b bytes.Buffer
	preflight.Print(&b, rs)
	out := b.String()
	if !preflight.Failed(rs) {
		t.Fatalf("preflight passed:\n%s", out)
	}
	m := byCheck(rs)
	for c, want := range map[string]string{
		"clock skew":       "synchronise the clock",
		"role maintenance": "MaintenanceRole (EnableMaintenance=true)",
		"disk space":       "free space",
	} {
		if m[c].Status != preflight.Fail || !strings.Contains(m[c].Fix, want) {
			t.Errorf("%s: %+v, want a failure whose fix says %q", c, m[c], want)
		}
	}
	if !strings.Contains(out, "fix: synchronise") || !strings.Contains(out, "preflight failed: 3 of") {
		t.Errorf("table:\n%s", out)
	}

	ims.Close()
	m = byCheck(preflight.Run(context.Background(), preflight.Options{Stack: st, StateDir: t.TempDir()}))
	if m["egress to imsd"].Status != preflight.Fail || !strings.Contains(m["egress to imsd"].Fix, "allow outbound HTTPS") {
		t.Errorf("unreachable imsd: %+v", m["egress to imsd"])
	}
}

// The Kubernetes row: checked when the stack says the app has helm
// components or a kubeconfig is given, failing with the flag to pass.
func TestPreflightKubernetes(t *testing.T) {
	_, st, _ := fixture(t, 0)
	if m := byCheck(preflight.Run(t.Context(), preflight.Options{Stack: st, StateDir: t.TempDir()})); m["kubernetes"].Check != "" {
		t.Errorf("no helm components, no kubeconfig: %+v, want no kubernetes row", m["kubernetes"])
	}
	st.Config.Kubernetes = true
	called := 0
	reach := func(err error) func(context.Context) (string, error) {
		return func(context.Context) (string, error) {
			called++
			return "https://127.0.0.1:6443, Kubernetes v1.37.0", err
		}
	}
	rs := preflight.Run(t.Context(), preflight.Options{Stack: st, StateDir: t.TempDir(), Kubernetes: reach(nil)})
	if m := byCheck(rs); m["kubernetes"].Status != preflight.Fail || !strings.Contains(m["kubernetes"].Fix, "agentd with --kubeconfig FILE (or set KUBECONFIG)") || called != 0 {
		t.Errorf("helm components, no kubeconfig: %+v (reached %d times)", m["kubernetes"], called)
	}
	m := byCheck(preflight.Run(t.Context(), preflight.Options{Stack: st, StateDir: t.TempDir(), Kubeconfig: "/k", Kubernetes: reach(nil)}))
	if m["kubernetes"].Status != preflight.Pass || m["kubernetes"].Detail != "https://127.0.0.1:6443, Kubernetes v1.37.0" {
		t.Errorf("reachable cluster: %+v", m["kubernetes"])
	}
	st.Config.Kubernetes = false
	m = byCheck(preflight.Run(t.Context(), preflight.Options{Stack: st, StateDir: t.TempDir(), Kubeconfig: "/k",
		Kubernetes: reach(errors.New("https://127.0.0.1:6443/version: connection refused"))}))
	if m["kubernetes"].Status != preflight.Fail || !strings.Contains(m["kubernetes"].Detail, "connection refused") || !strings.Contains(m["kubernetes"].Fix, "--kubeconfig") {
		t.Errorf("a kubeconfig whose cluster is down: %+v", m["kubernetes"])
	}
}

// A key file of the state directory that other users may read fails
// the check, naming it and its mode: a copy made readable (a restore, a
// volume's group ownership) lets whoever reads it act as the agent.
func TestPreflightKeyFilesReadable(t *testing.T) {
	dir := t.TempDir()
	row := func() preflight.Result {
		t.Helper()
		return byCheck(preflight.Run(context.Background(), preflight.Options{StateDir: dir, IMS: "http://127.0.0.1:1"}))["identity key files"]
	}
	if err := os.WriteFile(filepath.Join(dir, "identity.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := row(); r.Status != preflight.Pass {
		t.Fatalf("identity.json 0600: %+v", r)
	}
	for _, c := range []struct {
		name string
		mode os.FileMode
		want string
	}{
		{"identity.json", 0o644, "identity.json (mode 0644: readable by every user of this machine)"},
		{"identity-next.json", 0o640, "identity-next.json (mode 0640: readable by its group"},
	} {
		if err := os.WriteFile(filepath.Join(dir, c.name), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, c.name), c.mode); err != nil {
			t.Fatal(err)
		}
		if r := row(); r.Status != preflight.Fail || !strings.Contains(r.Detail, c.want) || !strings.Contains(r.Fix, "chmod 600") {
			t.Errorf("%s %04o: %+v, want a failure naming %q", c.name, c.mode, r, c.want)
		}
		os.Chmod(filepath.Join(dir, c.name), 0o600)
	}
}
