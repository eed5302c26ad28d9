package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/internal/proctest"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// terraformMirror returns the provider mirror scripts/terraform-mirror.sh
// builds, skipping the test without it or without terraform (failing
// under CI=true, where .ci/run provides both).
func terraformMirror(t *testing.T) string {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	if _, err := exec.LookPath("terraform"); err != nil {
		missing("terraform is not on PATH (install Terraform 1.11, as .ci/run does)")
	}
	mirror := os.Getenv("BYOC_TERRAFORM_PROVIDERS")
	if mirror == "" {
		mirror, _ = filepath.Abs(filepath.Join("..", ".cache", "terraform-mirror"))
	}
	if _, err := os.Stat(filepath.Join(mirror, "registry.terraform.io", "hashicorp", "local")); err != nil {
		missing("no Terraform provider mirror at %s: run scripts/terraform-mirror.sh", mirror)
	}
	return mirror
}

// The app `byoc app init` writes provisions on a fresh machine with
// terraform on the PATH: its sandbox (a terraform module on the local and
// terraform_data providers) first, then the db component, a terraform
// module that takes the sandbox's vpc_id output; a real imsd, a real
// agentd, the built-in terraform plugin as its subprocess, modules from
// the agent's install registry, providers from the mirror, state in the
// agent's state dir. Deprovision destroys both in reverse order. The
// example's helm and image components (and the actions around them) are
// left out: this is the part that needs terraform only; TestExampleApp
// (example_test.go) runs the whole app against a kube-apiserver and a
// vendor registry.
func TestExampleAppTerraform(t *testing.T) {
	skipShort(t)
	mirror := terraformMirror(t)
	opts := fast
	opts.WorkflowInterval = 200 * time.Millisecond
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)

	dir := t.TempDir()
	cli.Run(0, "app", "init", dir)
	for _, f := range []string{"components/api.toml", "components/cache.toml", "components/web.toml", "actions/migrate.toml", "actions/healthz.toml"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	// The install file overrides the api's values; keep its inputs only.
	if err := os.WriteFile(filepath.Join(dir, "installs", "demo.toml"), []byte(`inputs = { domain = "demo.acme.example", tier = "large" }`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := cli.Run(0, "app", "push", dir)
	token := cluster.Pushed{Output: out}.EnrollToken(t)

	// The modules go into the agent's install registry, as a sync would
	// put them there.
	stateDir := t.TempDir()
	agentd := filepath.Join(cluster.Binaries(t), "agentd")
	// The config names each module by the digest the push prints.
	for m, config := range map[string]string{"sandbox": "sandbox.toml", "postgres": "components/db.toml"} {
		cmd := exec.Command(agentd, "module", "push", "--state-dir", stateDir, filepath.Join(dir, "modules", m), "modules/"+m+":0.1.0")
		b, err := cmd.CombinedOutput()
		dg := regexp.MustCompile(`^modules/` + m + `:0.1.0 (sha256:[0-9a-f]{64})\n$`).FindSubmatch(b)
		if err != nil || dg == nil {
			t.Fatalf("agentd module push %s: %v\n%s", m, err, b)
		}
		cfg, _ := os.ReadFile(filepath.Join(dir, config))
		if want := `module = "modules/` + m + "@" + string(dg[1]) + `"`; !strings.Contains(string(cfg), want) {
			t.Fatalf("%s does not name the pushed module (%s):\n%s", config, want, cfg)
		}
	}
	cluster.StartAgent(t, ims.URL(), token, stateDir, "--terraform-providers", mirror)

	started := time.Now()
	if out := cli.Run(0, "install", "provision", "demo", "--wait"); !strings.Contains(out, "succeeded: 2/2 done") {
		t.Fatalf("provision:\n%s", out)
	}
	t.Logf("provision (sandbox, then db) took %s", time.Since(started).Round(time.Millisecond))

	c := ims.Admin()
	ctx := context.Background()
	wfs, err := c.ListWorkflows(ctx, connect.NewRequest(&imsv1.ListWorkflowsRequest{Install: "demo"}))
	if err != nil {
		t.Fatal(err)
	}
	wf := wfs.Msg.Workflows[0].Id
	job := func(step string) *imsv1.Job {
		res, err := c.GetJob(ctx, connect.NewRequest(&imsv1.GetJobRequest{Id: jobOf(t, c, wf, step)}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Msg.Job
	}
	sandbox, db := job("sandbox"), job("db")
	vpc := sandbox.Outputs["vpc_id"]
	if !regexp.MustCompile(`^vpc-[0-9a-f]{8}$`).MatchString(vpc) {
		t.Fatalf("sandbox outputs %v: want a vpc_id", sandbox.Outputs)
	}
	if want := "postgres://events@db." + vpc + ".internal:5432/events?size=large"; db.Outputs["url"] != want {
		t.Fatalf("db's url %q, want %q (built from the sandbox's output)", db.Outputs["url"], want)
	}
	if sandbox.EndTime.AsTime().After(db.StartTime.AsTime()) {
		t.Errorf("the sandbox ran %s-%s, db started %s: want the sandbox first", sandbox.StartTime.AsTime(), sandbox.EndTime.AsTime(), db.StartTime.AsTime())
	}
	var lines []string
	for _, l := range cluster.Logs(t, c, sandbox.Id) {
		lines = append(lines, l.Text)
	}
	log := strings.Join(lines, "\n")
	for _, want := range []string{"terraform: module modules/sandbox@sha256:", "Installed hashicorp/local v1.4.0", "Apply complete! Resources: 3 added"} {
		if !strings.Contains(log, want) {
			t.Errorf("sandbox log lacks %q:\n%s", want, log)
		}
	}
	network := filepath.Join(stateDir, "components", "sandbox", "data", "network.json")
	b, err := os.ReadFile(network)
	if err != nil {
		t.Fatal(err)
	}
	var net struct {
		VPCID string `json:"vpc_id"`
	}
	if err := json.Unmarshal(b, &net); err != nil || net.VPCID != vpc {
		t.Fatalf("%s: %s (%v)", network, b, err)
	}
	for _, c := range []string{"sandbox", "db"} {
		if _, err := os.Stat(filepath.Join(stateDir, "components", c, "terraform.tfstate")); err != nil {
			t.Errorf("%s's state on the agent: %v", c, err)
		}
	}

	if out := cli.Run(0, "install", "deprovision", "demo", "--yes", "--wait"); !strings.Contains(out, "succeeded: 2/2 done") {
		t.Fatalf("deprovision:\n%s", out)
	}
	if _, err := os.Stat(network); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after deprovision %s: %v, want it gone", network, err)
	}
}

// slowTerraformApp is one terraform component whose apply waits as long as the
// install's wait input, between two objects.
func slowTerraformApp(modules, wait string) map[string]string {
	return map[string]string{
		"app.toml":    "name = \"slow\"\n",
		"inputs.toml": "[[input]]\nname = \"wait\"\nrequired = true\n",
		"components/slow.toml": `type = "terraform"
[config]
module_dir = "` + modules + `"
vars = { wait = "{{ .inputs.wait }}" }
`,
		"installs/acme.toml": `inputs = { wait = "` + wait + `" }` + "\n",
	}
}

// An operator cancels a terraform apply while Terraform waits in its
// middle: the agent interrupts the plugin and gives it its grace, the
// plugin interrupts Terraform, which saves the state and releases the
// lock, and the job ends cancelled; the next provision continues from
// that state and succeeds.
func TestTerraformCancelMidApply(t *testing.T) {
	skipShort(t)
	mirror := terraformMirror(t)
	opts := fast
	opts.WorkflowInterval = 200 * time.Millisecond
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	module, _ := filepath.Abs(filepath.Join("..", "plugins", "terraform", "testdata", "slow"))
	pushed := cli.PushApp(slowTerraformApp(module, "90s"))
	stateDir := t.TempDir()
	// The module is read from a directory on the agent (module_dir, for
	// development): the customer lets plugins read it.
	agent := cluster.StartAgent(t, ims.URL(), pushed.EnrollToken(t), stateDir, "--terraform-providers", mirror, "--cancel-grace", "45s",
		"--sandbox-read-only", module)

	cli.Run(0, "install", "provision", "acme")
	c := ims.Admin()
	var job string
	deadline := time.Now().Add(2 * time.Minute)
	for job == "" {
		if time.Now().After(deadline) {
			t.Fatal("the apply never reached its wait")
		}
		for _, j := range installJobs(t, c) {
			for _, l := range cluster.Logs(t, c, j.Id) {
				if strings.Contains(l.Text, "time_sleep.wait: Creating...") {
					job = j.Id
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Terraform logs "Creating..." just before it calls the provider; see
	// the plugin's TestCancelMidApply.
	time.Sleep(2 * time.Second)
	// Terraform and its providers, under the agent: none may outlive
	// the cancel (terraform-exec runs them in a process group of their
	// own; agentd ends every group of the plugin's session).
	tfProcs := map[int]string{}
	for _, pid := range proctest.Descendants(agent.Cmd.Process.Pid) {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.HasPrefix(string(comm), "terraform") {
			tfProcs[pid] = strings.TrimSpace(string(comm))
		}
	}
	if len(tfProcs) < 2 {
		t.Fatalf("terraform and its providers under the agent: %v, want terraform and at least one provider", tfProcs)
	}
	cancelled := time.Now()
	cli.Run(0, "job", "cancel", job, "--reason", "test cancel")
	j := cluster.WaitJob(t, c, job, time.Minute, imsv1.JobState_JOB_STATE_CANCELLED)
	t.Logf("job cancelled %s after the request", time.Since(cancelled).Round(time.Millisecond))
	cluster.Eventually(t, 10*time.Second, "terraform and its providers to end with the cancelled job", func() bool {
		for pid := range tfProcs {
			if proctest.Alive(pid) {
				return false
			}
		}
		return true
	})
	var lines []string
	for _, l := range cluster.Logs(t, c, job) {
		lines = append(lines, l.Text)
	}
	log := strings.Join(lines, "\n")
	for _, want := range []string{"[agentd] cancelled: test cancel: interrupting the plugin; waiting up to 45s for it to stop", "Interrupt received", "terraform: terraform apply interrupted (interrupted by the agent)"} {
		if !strings.Contains(log, want) {
			t.Errorf("the cancelled job's log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "did not stop within") {
		t.Errorf("the plugin was killed after the grace:\n%s", log)
	}
	t.Logf("job error: %s", j.Error)
	state := filepath.Join(stateDir, "components", "slow", "terraform.tfstate")
	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"terraform_data"`) || strings.Contains(string(b), `"time_sleep"`) {
		t.Errorf("state after the cancel:\n%s", b)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "components", "slow", ".terraform-running")); err == nil {
		t.Error("the interrupted run left its running marker")
	}

	// The next run continues from that state: pushing the shorter wait
	// redeploys the install (its inputs changed), and a provision after
	// it finds nothing left to do.
	cluster.WriteApp(t, pushed.Dir, slowTerraformApp(module, "1s"))
	cli.Run(0, "app", "push", pushed.Dir)
	if out := cli.Run(0, "install", "provision", "acme", "--wait"); !strings.Contains(out, "succeeded") {
		t.Fatalf("provision after the cancel:\n%s", out)
	}
	deadline = time.Now().Add(time.Minute)
	for {
		b, _ := os.ReadFile(state)
		if strings.Contains(string(b), `"time_sleep"`) && strings.Contains(string(b), `"last"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("state after the rerun:\n%s", b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
