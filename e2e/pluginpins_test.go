package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/plugins/sdk"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// buildLocalfile builds the example plugin into a fresh plugin directory
// and returns the binary and its sha256.
func buildLocalfile(t *testing.T) (bin, sum string) {
	t.Helper()
	bin = filepath.Join(t.TempDir(), "byoc-plugin-localfile")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join(cluster.RepoRoot(), "plugins", "examples", "localfile")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the example plugin: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(b)
	return bin, hex.EncodeToString(h[:])
}

// planJob enqueues a localfile plan on install and waits for it to end.
func planJob(t *testing.T, ims *cluster.IMS, install string) (*imsv1.Job, []string) {
	t.Helper()
	c := ims.Admin()
	ctx := context.Background()
	cfg, _ := structpb.NewStruct(map[string]any{"path": "/nonexistent/motd", "content": "hello\n", "mode": "0644"})
	res, err := c.EnqueueJob(ctx, connect.NewRequest(&imsv1.EnqueueJobRequest{Install: install, ComponentType: "localfile", Operation: "plan", Config: cfg}))
	if err != nil {
		t.Fatal(err)
	}
	var job *imsv1.Job
	cluster.Eventually(t, 30*time.Second, "the plan to end", func() bool {
		got, err := c.GetJob(ctx, connect.NewRequest(&imsv1.GetJobRequest{Id: res.Msg.Job.Id}))
		job = got.Msg.GetJob()
		return err == nil && job.GetEndTime() != nil
	})
	var lines []string
	for _, l := range cluster.Logs(t, c, job.Id) {
		lines = append(lines, l.Text)
	}
	return job, lines
}

// The customer pins a rebuilt plugin with agentd plugin pin while the
// agent runs: the next job uses it, no restart, and the agent's journal
// records the pin (issue 29 item 2).
func TestPluginPinFileWithoutRestart(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	bin, sum := buildLocalfile(t)
	_, token := cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	state := filepath.Join(t.TempDir(), "agent")
	cluster.StartAgent(t, ims.URL(), token, state, "--plugin-dir", filepath.Dir(bin))
	waitConnected(t, ims, "acme")

	job, _ := planJob(t, ims, "acme")
	want := "agentd plugin pin localfile " + sum
	if job.GetState() != imsv1.JobState_JOB_STATE_FAILED || !strings.Contains(job.GetError(), want) {
		t.Fatalf("unpinned plan: %s %q, want it failed naming %q", job.GetState(), job.GetError(), want)
	}
	out, err := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), "plugin", "--state-dir", state, "pin", "localfile", "--file", bin).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "pinned localfile: "+sum) {
		t.Fatalf("agentd plugin pin: %v\n%s", err, out)
	}
	job, _ = planJob(t, ims, "acme")
	if job.GetState() != imsv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("plan after pinning: %s %q", job.GetState(), job.GetError())
	}
	rs, err := auditlog.ReadFile(filepath.Join(auditlog.Dir(state), auditlog.AgentFile))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range rs {
		found = found || (r.Kind == "plugin.pinned" && r.Subject == "plugin:localfile" && strings.Contains(r.Data, sum))
	}
	if !found {
		t.Fatalf("the agent's journal has no plugin.pinned record: %+v", rs)
	}
}

// A real agent started with BYOC_REATTACH_PLUGINS runs its jobs of the
// type through a plugin started by hand in debug mode (as under delve),
// which keeps running after them (issue 29 item 3).
func TestAgentReattachesToPluginInDebugMode(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	bin, _ := buildLocalfile(t)
	dbg := exec.Command(bin, "debug")
	pipe, err := dbg.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := dbg.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dbg.Process.Kill(); _ = dbg.Wait() })
	reattach := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), sdk.ReattachEnv+"="); ok {
				reattach <- strings.Trim(v, "'")
			}
		}
	}()
	var value string
	select {
	case value = <-reattach:
	case <-time.After(30 * time.Second):
		t.Fatal("the plugin in debug mode printed no reattach line")
	}
	_, token := cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	// No --plugin-dir, no pin: the agent starts nothing for the type.
	cluster.StartAgentEnv(t, []string{sdk.ReattachEnv + "=" + value}, ims.URL(), token, filepath.Join(t.TempDir(), "agent"))
	waitConnected(t, ims, "acme")
	for range 2 {
		job, lines := planJob(t, ims, "acme")
		if job.GetState() != imsv1.JobState_JOB_STATE_SUCCEEDED || !strings.Contains(strings.Join(lines, "\n"), "DEBUG MODE: reattached through "+sdk.ReattachEnv) {
			t.Fatalf("plan through the plugin in debug mode: %s %q\n%s", job.GetState(), job.GetError(), strings.Join(lines, "\n"))
		}
	}
	if err := dbg.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatalf("the plugin in debug mode is gone after the jobs: %v", err)
	}
	if err := dbg.Wait(); err != nil {
		t.Fatalf("stopped with Ctrl-C: %v", err)
	}
}
