package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/server"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// buildAgentVersion builds agentd and byoc-plugins stamped as version v
// into a new directory.
func buildAgentVersion(t *testing.T, v string) string {
	t.Helper()
	dir := t.TempDir()
	bi := "github.com/byoc-dev/byoc/internal/buildinfo"
	cmd := exec.Command("nice", "go", "build", "-ldflags", "-X "+bi+".version="+v, "-o", dir+string(filepath.Separator), "./agentd", "./plugins/bundle/byoc-plugins")
	cmd.Dir = cluster.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build agentd %s: %v\n%s", v, err, out)
	}
	return dir
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err == nil {
		err = os.WriteFile(to, b, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// An agent updates itself through the install registry as its
// customer's policy allows (issue 27): a release signed by another key,
// a version the pin forbids, an automatic update under a manual policy
// and one outside the policy's window are refused and journalled, nothing swapped; an allowed
// release is swapped in while a job runs: the agent drains (the job
// ends, once) and runs the new version in its place, which reconnects
// and confirms it; a bad release (imsd refuses its
// version, so it never reconnects) is rolled back by the agent alone to
// the version before, which reconnects.
func TestAgentUpdatesItself(t *testing.T) {
	skipShort(t)
	ocitest.Need(t)
	o := fast
	o.Version = "v1.5.0" // serves agents v1.3 to v1.5
	ims := cluster.StartIMS(t, o)
	cli := cluster.NewCLI(t, ims)
	vendor := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	repo := vendor.Host + "/byoc/agent"
	key := filepath.Join(ims.DataDir, server.SigningKeyFileName)
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(otherKey)
	otherKeyFile := filepath.Join(t.TempDir(), "other.key")
	if err := os.WriteFile(otherKeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}

	builds := map[string]string{}
	for _, v := range []string{"v1.4.0", "v1.5.0", "v1.6.0"} {
		builds[v] = buildAgentVersion(t, v)
	}
	publish := func(v, build, keyFile string) string {
		t.Helper()
		dist := t.TempDir()
		copyFile(t, filepath.Join(builds[build], "agentd"), filepath.Join(dist, "agentd_"+runtime.GOOS+"_"+runtime.GOARCH))
		copyFile(t, filepath.Join(builds[build], "byoc-plugins"), filepath.Join(dist, "byoc-plugins_"+runtime.GOOS+"_"+runtime.GOARCH))
		out := cli.Run(0, "agent", "publish", dist, "--version", v, "--to", repo, "--signing-key", keyFile, "-o", "json")
		var r struct{ Reference string }
		if err := json.Unmarshal([]byte(out), &r); err != nil || !strings.HasPrefix(r.Reference, "oci://"+repo+"@sha256:") {
			t.Fatalf("publish %s: %v\n%s", v, err, out)
		}
		return r.Reference
	}
	v150, v160 := publish("v1.5.0", "v1.5.0", key), publish("v1.6.0", "v1.6.0", key)
	// Another version (another digest), signed by a key imsd never had.
	forged := publish("v1.5.1", "v1.5.0", otherKeyFile)

	// The install's agent runs v1.4.0 from a directory of its own.
	bin := t.TempDir()
	copyFile(t, filepath.Join(builds["v1.4.0"], "agentd"), filepath.Join(bin, "agentd"))
	copyFile(t, filepath.Join(builds["v1.4.0"], "byoc-plugins"), filepath.Join(bin, "byoc-plugins"))
	_, token := cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	state := filepath.Join(t.TempDir(), "agent")
	agent := cluster.StartAgentBin(t, filepath.Join(bin, "agentd"), nil, ims.URL(), token, state)
	reports := func(v string) {
		t.Helper()
		cluster.Eventually(t, 60*time.Second, "the agent to connect as "+v, func() bool {
			r, err := ims.Admin().GetInstall(context.Background(), connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: "acme"}))
			return err == nil && r.Msg.Install.Agent != nil && r.Msg.Install.Agent.Connected && r.Msg.Install.Agent.Version == v
		})
	}
	reports("v1.4.0")

	update := func(code int, args ...string) string {
		t.Helper()
		c := exec.Command(filepath.Join(bin, "agentd"), append([]string{"update", "--state-dir", state}, args...)...)
		out, err := c.CombinedOutput()
		if got := c.ProcessState.ExitCode(); got != code {
			t.Fatalf("agentd update %s: exit %d (%v), want %d\n%s", strings.Join(args, " "), got, err, code, out)
		}
		return string(out)
	}
	running := func() string {
		t.Helper()
		out, err := exec.Command(filepath.Join(bin, "agentd"), "--version").Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(string(out))[1]
	}
	journal := func() string {
		rs, _ := auditlog.ReadFile(filepath.Join(auditlog.Dir(state), auditlog.AgentFile))
		var kinds []string
		for _, r := range rs {
			if strings.HasPrefix(r.Kind, "agent_update_") {
				kinds = append(kinds, r.Kind)
			}
		}
		return strings.Join(kinds, ",")
	}

	// Refused: a signature by a key the agent does not trust, a version
	// the pin forbids, an automatic update under the manual policy.
	if out := update(1, "apply", forged); !strings.Contains(out, "no signature by a trusted key") {
		t.Fatalf("forged: %s", out)
	}
	update(0, "policy", "--pin", "v1.4.0")
	if out := update(1, "apply", v150); !strings.Contains(out, "pins version v1.4.0") {
		t.Fatalf("pinned: %s", out)
	}
	update(0, "policy", "--manual")
	if out := update(1, "apply", "--auto", v150); !strings.Contains(out, "the update policy is manual") {
		t.Fatalf("manual: %s", out)
	}
	if running() != "v1.4.0" {
		t.Fatal("a refused update swapped agentd")
	}

	// A window closed now (tomorrow's day only) refuses, one open allows.
	tomorrow := time.Now().UTC().Add(24 * time.Hour).Weekday().String()[:3]
	update(0, "policy", "--allow", ">=1.4 <2", "--window", tomorrow+" 00:00-24:00 UTC")
	if out := update(1, "apply", "--auto", v150); !strings.Contains(out, "is closed; it next opens") {
		t.Fatalf("closed window: %s", out)
	}
	if out := update(0, "policy", "--window", "daily 00:00-24:00 UTC"); !strings.Contains(out, "versions >=1.4 <2, in the window daily 00:00-24:00 UTC") {
		t.Fatalf("policy: %s", out)
	}
	// A job running across the update: the agent drains (the job ends
	// and is reported), then runs v1.5.0 in its place; the job ran once.
	c := ims.Admin()
	job := enqueue(t, c, "acme", `sleep 6; echo ran-once`, 60)
	cluster.WaitJob(t, c, job.Id, 30*time.Second, imsv1.JobState_JOB_STATE_RUNNING)
	pid := agent.Cmd.Process.Pid
	if out := update(0, "apply", "--auto", v150); !strings.Contains(out, "v1.4.0 -> v1.5.0") {
		t.Fatalf("apply: %s", out)
	}
	if running() != "v1.5.0" {
		t.Fatal("not swapped")
	}
	if r, err := c.GetJob(context.Background(), connect.NewRequest(&imsv1.GetJobRequest{Id: job.Id})); err != nil || r.Msg.Job.State != imsv1.JobState_JOB_STATE_RUNNING {
		t.Fatalf("the job ended before the update was applied (lengthen it): %v", err)
	}
	done := cluster.WaitJob(t, c, job.Id, 30*time.Second, imsv1.JobState_JOB_STATE_SUCCEEDED, imsv1.JobState_JOB_STATE_FAILED)
	if done.State != imsv1.JobState_JOB_STATE_SUCCEEDED || done.GetAttempt() != 1 {
		t.Fatalf("the job across the update: %v, attempt %d", done.State, done.GetAttempt())
	}
	var ran int
	for _, l := range cluster.Logs(t, c, job.Id) {
		ran += strings.Count(l.Text, "ran-once")
	}
	if ran != 1 {
		t.Fatalf("the job's log says ran-once %d times", ran)
	}
	reports("v1.5.0")
	if agent.Exited() || agent.Cmd.Process.Pid != pid || !strings.Contains(agent.Output(), "drained; running the new version") {
		t.Fatalf("the agent did not run v1.5.0 in its own place:\n%s", agent.Output())
	}
	cluster.Eventually(t, 30*time.Second, "the update to be confirmed", func() bool {
		_, err := os.Stat(filepath.Join(state, "update.json"))
		return os.IsNotExist(err) && strings.Contains(journal(), "agent_update_confirmed")
	})
	if j := journal(); j != "agent_update_refused,agent_update_refused,agent_update_refused,agent_update_refused,agent_update_applied,agent_update_confirmed" {
		t.Fatalf("journal: %s", j)
	}
	if _, err := os.Stat(filepath.Join(bin, "agentd.prev")); !os.IsNotExist(err) {
		t.Fatalf("agentd.prev after the confirmation: %v", err)
	}

	// Bad: v1.6.0 is outside the versions imsd serves, never reconnects,
	// and is rolled back to v1.5.0 by the agent alone.
	if out := update(0, "apply", "--confirm-within", "5s", v160); !strings.Contains(out, "v1.5.0 -> v1.6.0") {
		t.Fatalf("apply v1.6.0: %s", out)
	}
	cluster.Eventually(t, 60*time.Second, "the rollback to v1.5.0", func() bool {
		return strings.HasSuffix(journal(), "agent_update_applied,agent_update_rolled_back")
	})
	reports("v1.5.0")
	if running() != "v1.5.0" || agent.Exited() {
		t.Fatalf("after the rollback: agentd %s, exited %v\n%s", running(), agent.Exited(), agent.Output())
	}
	if !strings.Contains(agent.Output(), "the agent update failed; rolling back") {
		t.Fatalf("no rollback in the agent's log:\n%s", agent.Output())
	}
}
