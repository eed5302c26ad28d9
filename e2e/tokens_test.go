package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// byoc token create/list/revoke with the real binary: a scoped, expiring
// token is shown once, works with its role only there, shows its last
// use, and stops working once revoked; imsd token create --admin on the
// server's host mints a working admin token from the database alone;
// every change is in the vendor audit chain with its actor.
func TestTokenLifecycleAndRecovery(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	ctx := context.Background()
	var files []*imsv1.AppFile
	for p, c := range rolesApp {
		files = append(files, &imsv1.AppFile{Path: p, Content: []byte(c)})
	}
	if _, err := ims.Admin().PushAppRevision(ctx, connect.NewRequest(&imsv1.PushAppRevisionRequest{Files: files})); err != nil {
		t.Fatal(err)
	}
	cli := cluster.NewCLI(t, ims)

	out, errOut, code := cli.Exec("token", "create", "--name", "ci-deploy", "--role", "operator", "--install", "acme", "--expires", "30d")
	secret := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(secret, "byoc_op_") || strings.Count(out, "\n") != 1 || !strings.Contains(errOut, "operator on install acme") || !strings.Contains(errOut, "shown once") {
		t.Fatalf("token create: exit %d\n%s\n%s", code, out, errOut)
	}
	cli.Run(2, "token", "create", "--name", "x", "--role", "root")
	if got := cli.Run(1, "token", "create", "--name", "ci-deploy", "--role", "viewer"); !strings.Contains(got, "ci-deploy") || !strings.Contains(got, "exists") {
		t.Fatalf("duplicate name: %s", got)
	}

	// The token works where its grant says, and its use is recorded.
	ci := cluster.NewCLIWith(t, filepath.Join(t.TempDir(), "ci.json"), ims.URL(), secret)
	who := ci.Run(0, "auth", "whoami")
	for _, want := range []string{"ci-deploy", "operator on install acme (token ci-deploy)", "Expires"} {
		if !strings.Contains(who, want) {
			t.Errorf("whoami lacks %q:\n%s", want, who)
		}
	}
	if got := ci.Run(0, "auth", "can-i", "provision", "acme"); !strings.HasPrefix(got, "yes: operator on install acme") {
		t.Errorf("can-i provision acme: %s", got)
	}
	if got := ci.Run(1, "auth", "can-i", "provision", "globex"); !strings.Contains(got, "no: token ci-deploy holds role operator on install acme") {
		t.Errorf("can-i provision globex: %s", got)
	}
	if got := ci.Run(1, "install", "provision", "globex"); !strings.Contains(got, "permission denied") || !strings.Contains(got, "install globex") {
		t.Errorf("provision globex: %s", got)
	}
	if got := ci.Run(0, "install", "list"); strings.Contains(got, "globex") || !strings.Contains(got, "acme") {
		t.Errorf("install list with ci-deploy:\n%s", got)
	}
	list := cli.Run(0, "token", "list")
	var row string
	for _, l := range strings.Split(list, "\n") {
		if strings.HasPrefix(l, "ci-deploy ") {
			row = l
		}
	}
	if !strings.Contains(row, "operator") || !strings.Contains(row, "install acme") || !strings.Contains(row, "ago") || strings.Contains(row, "never") || !strings.Contains(row, "token:admin") {
		t.Errorf("token list row: %q\n%s", row, list)
	}

	cli.Run(0, "token", "revoke", "ci-deploy")
	if got := ci.Run(1, "auth", "whoami"); !strings.Contains(got, "unknown or revoked") {
		t.Errorf("revoked token still works? %s", got)
	}
	if got := cli.Run(1, "token", "revoke", "ci-deploy"); !strings.Contains(got, "no unrevoked api token") {
		t.Errorf("second revoke: %s", got)
	}

	// Recovery on the server's host, while imsd runs.
	cmd := exec.Command(filepath.Join(cluster.Binaries(t), "imsd"), "token", "create", "--admin", "--name", "recovered", "--data-dir", ims.DataDir)
	rec, err := cmd.Output()
	if err != nil {
		t.Fatalf("imsd token create: %v", err)
	}
	rc := cluster.NewCLIWith(t, filepath.Join(t.TempDir(), "rec.json"), ims.URL(), strings.TrimSpace(string(rec)))
	if got := rc.Run(0, "auth", "whoami"); !strings.Contains(got, "admin on every install (token recovered)") {
		t.Errorf("recovered token whoami: %s", got)
	}
	if err := exec.Command(filepath.Join(cluster.Binaries(t), "imsd"), "token", "create", "--data-dir", ims.DataDir).Run(); err == nil {
		t.Error("imsd token create without --admin succeeded")
	}

	audit := cli.Run(0, "audit", "list", "--vendor")
	for _, want := range []string{"token.created", "token.revoked", "token:ci-deploy", "host:"} {
		if !strings.Contains(audit, want) {
			t.Errorf("vendor audit lacks %q:\n%s", want, audit)
		}
	}
}
