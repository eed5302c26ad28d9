package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// A debug command's argument marked sensitive reaches the script in its
// environment, but is masked in the audit record, the job's stored config
// (and imsd's database as a whole), the answer, and the job's output.
func TestDebugSensitiveArgument(t *testing.T) {
	skipShort(t)
	const secret = "hunter2-S3cret-value"
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	pushed := cli.PushApp(map[string]string{
		"app.toml": "name = \"shop\"\n",
		"components/api.toml": `type = "action"
[config]
steps = [{ name = "api", script = "echo api" }]
`,
		"debug/db.toml": `description = "Checks the database login."
script = '''
echo "user=$ARG_USER length=${#ARG_PASSWORD}"
printf '%s\n' "$ARG_PASSWORD" | tr 'a-z' 'A-Z'
echo "pw=$ARG_PASSWORD"
'''
[[arg]]
name = "user"
[[arg]]
name = "password"
sensitive = true
required = true
`,
		"installs/acme.toml": "",
	})
	cluster.StartAgent(t, ims.URL(), pushed.EnrollToken(t), t.TempDir())
	if out := cli.Run(0, "debug", "acme"); !strings.Contains(out, "password: string, required, sensitive") {
		t.Fatalf("debug list:\n%s", out)
	}
	out := cli.Run(0, "debug", "acme", "db", "app", "--password", secret)
	if !strings.Contains(out, "user=app length=20") || !strings.Contains(out, strings.ToUpper(secret)) || !strings.Contains(out, "pw=***") || strings.Contains(out, secret) {
		t.Fatalf("byoc debug db:\n%s", out)
	}
	ctx := context.Background()
	admin := ims.Admin()
	evs, err := admin.ListAuditEvents(ctx, connect.NewRequest(&imsv1.ListAuditEventsRequest{Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	var jobID string
	for _, e := range evs.Msg.Events {
		if strings.Contains(e.Data, secret) {
			t.Errorf("audit event %s holds the sensitive value: %s", e.Kind, e.Data)
		}
		if e.Kind == "debug.run" {
			if !strings.Contains(e.Data, `\"password\":\"***\"`) {
				t.Errorf("debug.run does not show the password masked: %s", e.Data)
			}
			for _, f := range strings.Split(e.Data, `"`) {
				if strings.HasPrefix(f, "job_") {
					jobID = f
				}
			}
		}
	}
	if jobID == "" {
		t.Fatalf("no debug.run event with a job: %v", evs.Msg.Events)
	}
	job, err := admin.GetJob(ctx, connect.NewRequest(&imsv1.GetJobRequest{Id: jobID}))
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := protojson.Marshal(job.Msg)
	if bytes.Contains(cfg, []byte(secret)) || !bytes.Contains(cfg, []byte(`"ARG_PASSWORD":"***"`)) {
		t.Errorf("the job's stored config: %s", cfg)
	}
	// Nowhere in imsd's database.
	files, _ := filepath.Glob(filepath.Join(ims.DataDir, "*"))
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds the sensitive value", f)
		}
	}
	if len(files) == 0 {
		t.Errorf("no files in imsd's data dir %s", ims.DataDir)
	}
}
