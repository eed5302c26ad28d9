package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/internal/syncbuf"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// followApp has two components: db, whose step prints the input n, and
// web, which reads no input (so changing n redeploys db only).
var followApp = map[string]string{
	"app.toml":            "name = \"shop\"\n",
	"inputs.toml":         "[[input]]\nname = \"n\"\ndefault = \"1\"\n",
	"components/db.toml":  "type = \"action\"\n[config]\nsteps = [{ name = \"db\", script = \"echo db run {{ .inputs.n }}\" }]\n",
	"components/web.toml": "type = \"action\"\n[config]\nsteps = [{ name = \"web\", script = \"echo web up\" }]\n",
	"installs/acme.toml":  "",
}

// byoc logs INSTALL -f follows the install, not one job: jobs that start
// after it began are streamed too, each line prefixed by its job and
// component, and --component keeps to that component's jobs; Ctrl-C
// stops it (exit 130).
func TestLogsFollowsNewJobsOfTheInstall(t *testing.T) {
	skipShort(t)
	opts := fast
	opts.WorkflowInterval = 200 * time.Millisecond
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	pushed := cli.PushApp(followApp)
	cluster.StartAgent(t, ims.URL(), pushed.EnrollToken(t), t.TempDir())

	start := func(args ...string) (*exec.Cmd, *syncbuf.Buffer, *syncbuf.Buffer) {
		cmd := cli.Cmd(args...)
		stdout, stderr := &syncbuf.Buffer{}, &syncbuf.Buffer{}
		cmd.Stdout, cmd.Stderr = stdout, stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
		})
		return cmd, stdout, stderr
	}
	waitLine := func(what string, out, errOut *syncbuf.Buffer, re string) {
		t.Helper()
		rx := regexp.MustCompile(re)
		deadline := time.Now().Add(30 * time.Second)
		for !rx.MatchString(out.String()) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no line matching %s\nstdout:\n%s\nstderr:\n%s", what, re, out, errOut)
			}
			time.Sleep(20 * time.Millisecond) // polling a process's output
		}
	}
	// Before the install has a job: the follower waits for the first,
	// then streams every job of the provision.
	all, allOut, allErr := start("logs", "acme", "-f")
	waitLine("logs -f before any job (stderr)", allErr, allOut, `install acme has no jobs yet.*waiting for one to start`)
	if out := cli.Run(0, "install", "provision", "acme", "--wait"); !strings.Contains(out, "succeeded: 2/2 done") {
		t.Fatalf("provision:\n%s", out)
	}
	waitLine("logs -f", allOut, allErr, `(?m)^\[db job_\w+\] db run 1$`)
	waitLine("logs -f", allOut, allErr, `(?m)^\[web job_\w+\] web up$`)

	// The newest job of db, from the start; in JSON, each line names its
	// job and component.
	db, dbOut, dbErr := start("logs", "acme", "--component", "db", "-f")
	js, jsOut, jsErr := start("logs", "acme", "--component", "db", "-f", "-o", "json")
	waitLine("logs --component db -f -o json", jsOut, jsErr, `"component":"db".*"jobId":"job_\w+".*"text":"db run 1`)
	waitLine("logs --component db", dbOut, dbErr, `(?m)^\[db job_\w+\] db run 1$`)

	// A job with no component: the install's follower streams it, db's
	// does not.
	ctx := context.Background()
	c := ims.Admin()
	cfg, _ := structpb.NewStruct(map[string]any{"steps": []any{map[string]any{"name": "adhoc", "script": "echo not db"}}})
	adhoc, err := c.EnqueueJob(ctx, connect.NewRequest(&imsv1.EnqueueJobRequest{Install: "acme", ComponentType: "action", Operation: "apply", Config: cfg}))
	if err != nil {
		t.Fatal(err)
	}
	waitLine("logs -f", allOut, allErr, `(?m)^\[action apply `+adhoc.Msg.Job.Id+`\] not db$`)

	// db redeployed by a new input: a new job, streamed by both.
	if _, err := c.UpdateInstall(ctx, connect.NewRequest(&imsv1.UpdateInstallRequest{Install: "acme", SetInputs: map[string]string{"n": "2"}, Deploy: true})); err != nil {
		t.Fatal(err)
	}
	waitLine("logs --component db", dbOut, dbErr, `(?m)^\[db job_\w+\] db run 2$`)
	waitLine("logs -f", allOut, allErr, `(?m)^\[db job_\w+\] db run 2$`)
	if strings.Contains(dbOut.String(), "not db") || strings.Contains(dbOut.String(), "web up") {
		t.Errorf("logs --component db streamed another component's job:\n%s", dbOut)
	}
	runs := regexp.MustCompile(`(?m)^\[db (job_\w+)\] db run (\d)$`).FindAllStringSubmatch(dbOut.String(), -1)
	if len(runs) != 2 || runs[0][1] == runs[1][1] {
		t.Errorf("logs --component db: want db run 1 and db run 2 from two jobs, got %q", runs)
	}
	if !strings.Contains(dbErr.String(), "==> job ") || !strings.Contains(dbErr.String(), "succeeded") {
		t.Errorf("logs --component db: stderr does not name the new job or how it ended:\n%s", dbErr)
	}

	for name, cmd := range map[string]*exec.Cmd{"logs -f": all, "logs --component db -f": db, "logs -o json": js} {
		cmd.Process.Signal(os.Interrupt)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 130 {
			t.Errorf("%s after Ctrl-C: %v, want exit code 130", name, err)
		}
	}
	if !strings.Contains(allErr.String(), "Stopped following install acme") {
		t.Errorf("logs -f after Ctrl-C, stderr:\n%s", allErr)
	}
}
