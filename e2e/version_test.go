package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// byoc, imsd and agentd print the version, commit and date their build
// stamped for --version, and agentd reports that version to imsd, not
// "dev".
func TestVersionFromTheBuild(t *testing.T) {
	bin := cluster.Binaries(t)
	for _, prog := range []string{"byoc", "imsd", "agentd"} {
		out, err := exec.Command(filepath.Join(bin, prog), "--version").CombinedOutput()
		want := prog + " " + cluster.BuildVersion + " (commit " + cluster.BuildCommit + ", built " + cluster.BuildDate + ", go"
		if err != nil || !strings.HasPrefix(string(out), want) || strings.Count(string(out), "\n") != 1 {
			t.Errorf("%s --version: %v\n%q\nwant a line starting %q", prog, err, out, want)
		}
		// imsd states the agent versions it serves (the skew window).
		if prog == "imsd" && !strings.Contains(string(out), "; serves agentd ") {
			t.Errorf("imsd --version does not state the agent versions it serves: %q", out)
		}
	}
	ims := cluster.StartIMS(t, fast)
	c := ims.Admin()
	_, tok := cluster.NewInstall(t, c, "shop", "alpha")
	cluster.StartAgent(t, ims.URL(), tok, t.TempDir())
	var got string
	cluster.Eventually(t, 10*time.Second, "the agent to report its version", func() bool {
		r, err := c.GetInstall(context.Background(), connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: "alpha"}))
		if err != nil {
			return false
		}
		got = r.Msg.GetInstall().GetAgent().GetVersion()
		return got != ""
	})
	if got != cluster.BuildVersion {
		t.Errorf("the agent reports version %q, want %q", got, cluster.BuildVersion)
	}
}
