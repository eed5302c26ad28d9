package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// The vendor's build agent's reserved install (_vendor, made with the
// first build agent token) is no customer's: byoc install list and the
// fleet watch leave it out; install list --all and --app _vendor show it;
// install get _vendor still reads it.
func TestInstallListLeavesTheVendorOut(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	cli.Run(0, "build", "agent-token")

	names := func(args ...string) string {
		t.Helper()
		var list []struct{ Name string }
		out := cli.Run(0, append([]string{"install", "list", "-o", "json"}, args...)...)
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		var n []string
		for _, in := range list {
			n = append(n, in.Name)
		}
		return strings.Join(n, " ")
	}
	if got := names(); got != "acme" {
		t.Fatalf("install list: %q, want acme alone", got)
	}
	if got := names("-l", "!tier"); got != "acme" {
		t.Fatalf("install list -l '!tier': %q, want acme alone", got)
	}
	if got := names("--all"); got != "_vendor acme" && got != "acme _vendor" {
		t.Fatalf("install list --all: %q", got)
	}
	if got := names("--app", "_vendor"); got != "_vendor" {
		t.Fatalf("install list --app _vendor: %q", got)
	}
	if out := cli.Run(0, "install", "get", "_vendor"); !strings.Contains(out, "_vendor") {
		t.Fatalf("install get _vendor:\n%s", out)
	}

	// The fleet watch (the console's fleet view) sends acme alone.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := ims.Admin().WatchInstalls(ctx, connect.NewRequest(&imsv1.WatchInstallsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !st.Receive() {
		t.Fatalf("watch: %v", st.Err())
	}
	var got []string
	for _, s := range st.Msg().GetInstalls() {
		got = append(got, s.GetInstall().GetName())
	}
	if strings.Join(got, " ") != "acme" {
		t.Fatalf("fleet watch: %v, want acme alone", got)
	}
}
