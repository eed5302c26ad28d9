package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
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

func TestPreflightCommand(t *testing.T) {
	ims := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer ims.Close()
	var out, errb bytes.Buffer
	if code := preflightCmd(context.Background(), []string{"--stack-config", localStack(t, ims.URL), "--state-dir", t.TempDir()}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "role maintenance") || !strings.Contains(out.String(), "off") {
		t.Errorf("table:\n%s", out.String())
	}

	// Nothing listens here.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	out.Reset()
	if code := preflightCmd(context.Background(), []string{"--stack-config", localStack(t, "http://"+addr), "--state-dir", t.TempDir()}, &out, &errb); code != 1 {
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
