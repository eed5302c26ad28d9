package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// A plan's structured changes travel from a real third-party plugin
// through a real agent to imsd, are stored with the job, and byoc job
// get shows them.
func TestPlanReachesTheOperator(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	token := cli.PushApp(map[string]string{"app.toml": "name = \"notes\"\n", "installs/acme.toml": ""}).EnrollToken(t)

	plugins := t.TempDir()
	bin := filepath.Join(plugins, "byoc-plugin-localfile")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join(cluster.RepoRoot(), "plugins", "examples", "localfile")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the example plugin: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	target := filepath.Join(t.TempDir(), "motd")
	// The plugin reads a file outside the agent: the customer lets it.
	cluster.StartAgent(t, ims.URL(), token, t.TempDir(), "--plugin-dir", plugins, "--plugin-pin", "localfile="+hex.EncodeToString(sum[:]),
		"--sandbox-writable", filepath.Dir(target))

	os.WriteFile(target, []byte("old\n"), 0o644)
	cfg, _ := structpb.NewStruct(map[string]any{"path": target, "content": "hello\n", "mode": "0600"})
	c := ims.Admin()
	ctx := context.Background()
	res, err := c.EnqueueJob(ctx, connect.NewRequest(&imsv1.EnqueueJobRequest{Install: "acme", ComponentType: "localfile", Operation: "plan", Config: cfg}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.Job.Id
	var job *imsv1.Job
	cluster.Eventually(t, 20*time.Second, "the plan to end", func() bool {
		got, err := c.GetJob(ctx, connect.NewRequest(&imsv1.GetJobRequest{Id: id}))
		job = got.Msg.GetJob()
		return err == nil && job.GetEndTime() != nil
	})
	if job.GetState() != imsv1.JobState_JOB_STATE_SUCCEEDED || len(job.GetPlannedChanges()) != 1 {
		t.Fatalf("plan job: %v", job)
	}
	pc := job.PlannedChanges[0]
	if pc.Address != target || pc.Action != "update" || pc.GetBefore().GetStructValue().GetFields()["mode"].GetStringValue() != "0644" ||
		pc.GetAfter().GetStructValue().GetFields()["mode"].GetStringValue() != "0600" {
		t.Fatalf("planned change: %v", pc)
	}
	out := cli.Run(0, "job", "get", id)
	for _, want := range []string{"Plan: 0 to create, 1 to update, 0 to delete, 0 to replace", "  ~ " + target + ": update " + target, "      mode: \"0644\" → \"0600\"", "      size: 4 → 6"} {
		if !strings.Contains(out, want) {
			t.Errorf("job get lacks %q:\n%s", want, out)
		}
	}
	if data, _ := os.ReadFile(target); string(data) != "old\n" {
		t.Errorf("the plan changed the file: %q", data)
	}
	var lines []string
	for _, l := range cluster.Logs(t, c, id) {
		lines = append(lines, l.Text)
	}
	logs := strings.Join(lines, "\n")
	if !strings.Contains(logs, "[agentd] plan: update "+target) {
		t.Errorf("job log:\n%s", logs)
	}
}
