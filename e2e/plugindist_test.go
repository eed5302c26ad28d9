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
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/server"
	"github.com/byoc-dev/byoc/internal/auditchain"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// buildGreetingVersion builds the greeting example as version v.
func buildGreetingVersion(t *testing.T, v string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "byoc-plugin-greeting")
	build := exec.Command("go", "build", "-ldflags", "-X main.version="+v, "-o", bin, ".")
	build.Dir = filepath.Join(cluster.RepoRoot(), "plugins", "examples", "greeting")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the greeting example: %v\n%s", err, out)
	}
	return bin
}

// greetingPlan enqueues a greeting plan on install, waits for it to end
// and returns it with its log.
func greetingPlan(t *testing.T, ims *cluster.IMS, install string) (*imsv1.Job, string) {
	t.Helper()
	c := ims.Admin()
	ctx := context.Background()
	cfg, _ := structpb.NewStruct(map[string]any{"name": "ada"})
	res, err := c.EnqueueJob(ctx, connect.NewRequest(&imsv1.EnqueueJobRequest{Install: install, ComponentType: "greeting", Operation: "plan", Config: cfg}))
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
	return job, strings.Join(lines, "\n")
}

// A plugin published to the vendor registry with byoc plugin publish
// (signed with imsd's key) is registered from the release, installed on
// a running agent with agentd plugin install (through the install
// registry, verified, pinned), runs the agent's next job of its type;
// the next release replaces it without restarting agentd; a release
// signed by another key is refused and changes nothing (issue 29). byoc
// install artifacts shows the release the agent runs as verified, and a
// pinned release it refused as refused with the reason (issue 31).
func TestPluginPublishedInstalledUpgraded(t *testing.T) {
	skipShort(t)
	ocitest.Need(t)
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	vendor := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	key := filepath.Join(ims.DataDir, server.SigningKeyFileName)
	repo := vendor.Host + "/plugins/greeting"

	publish := func(v, keyFile string) string {
		t.Helper()
		out := cli.Run(0, "plugin", "publish", buildGreetingVersion(t, v), "--name", "greeting", "--version", v,
			"--to", repo, "--signing-key", keyFile, "-o", "json")
		var r struct {
			Reference string `json:"reference"`
			Digest    string `json:"digest"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil || !strings.HasPrefix(r.Reference, "oci://"+repo+"@sha256:") {
			t.Fatalf("publish %s: %v\n%s", v, err, out)
		}
		return r.Reference
	}
	ref1 := publish("0.1.0", key)
	if out := cli.Run(0, "plugin", "register", ref1); !strings.Contains(out, `Registered component type "greeting" version 0.1.0`) ||
		!strings.Contains(out, "from release "+strings.SplitN(ref1, "@", 2)[1]) {
		t.Fatalf("register from the release: %s", out)
	}

	_, token := cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	state := filepath.Join(t.TempDir(), "agent")
	cluster.StartAgent(t, ims.URL(), token, state)
	waitConnected(t, ims, "acme")
	agentd := filepath.Join(cluster.Binaries(t), "agentd")
	install := func(ref string) (string, error) {
		out, err := exec.Command(agentd, "plugin", "--state-dir", state, "install", ref).CombinedOutput()
		return string(out), err
	}

	if out, err := install(ref1); err != nil || !strings.Contains(out, "installed greeting 0.1.0") {
		t.Fatalf("agentd plugin install 0.1.0: %v\n%s", err, out)
	}
	job, log := greetingPlan(t, ims, "acme")
	if job.GetState() != imsv1.JobState_JOB_STATE_SUCCEEDED || !strings.Contains(log, "plugin greeting 0.1.0 started") {
		t.Fatalf("plan with 0.1.0: %s %q\n%s", job.GetState(), job.GetError(), log)
	}
	// The agent reports the release it runs: byoc install artifacts
	// lists it as kind plugin, verified with imsd's key.
	pluginRow := func(want ...string) string {
		t.Helper()
		var out string
		cluster.Eventually(t, 30*time.Second, "install artifacts --kind plugin to show "+strings.Join(want, ", "), func() bool {
			out = cli.Run(0, "install", "artifacts", "acme", "--kind", "plugin", "-o", "json")
			for _, w := range want {
				if !strings.Contains(out, w) {
					return false
				}
			}
			return true
		})
		return out
	}
	pluginRow(`"kind": "plugin"`, `"componentType": "greeting"`, `"version": "0.1.0"`, `"state": "verified"`, `"deployed": true`,
		`"keyId": "`, `"verifyTime": "`, strings.SplitN(ref1, "@", 2)[1])
	if out := cli.Run(0, "install", "artifacts", "acme"); !strings.Contains(out, "type greeting") || !strings.Contains(out, "plugin") ||
		!strings.Contains(out, "verified") {
		t.Fatalf("install artifacts:\n%s", out)
	}

	ref2 := publish("0.2.0", key)
	if out, err := install(ref2); err != nil || !strings.Contains(out, "installed greeting 0.2.0") {
		t.Fatalf("agentd plugin install 0.2.0: %v\n%s", err, out)
	}
	job, log = greetingPlan(t, ims, "acme")
	if job.GetState() != imsv1.JobState_JOB_STATE_SUCCEEDED || !strings.Contains(log, "plugin greeting 0.2.0 started") {
		t.Fatalf("plan after the upgrade (same agentd): %s %q\n%s", job.GetState(), job.GetError(), log)
	}

	// A release signed by a key that is not imsd's.
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(other)
	otherFile := filepath.Join(t.TempDir(), "other.key")
	if err := os.WriteFile(otherFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	ref3 := publish("0.3.0", otherFile)
	if out, err := install(ref3); err == nil || !strings.Contains(out, "refused: plugin greeting 0.3.0") ||
		!strings.Contains(out, "no signature by a trusted key") {
		t.Fatalf("agentd plugin install of a release signed by another key: %v\n%s", err, out)
	}
	job, log = greetingPlan(t, ims, "acme")
	if job.GetState() != imsv1.JobState_JOB_STATE_SUCCEEDED || !strings.Contains(log, "plugin greeting 0.2.0 started") {
		t.Fatalf("plan after the refusal: %s %q\n%s", job.GetState(), job.GetError(), log)
	}

	// A release pinned in the pin file (not installed) is installed from
	// the install registry by the next job that needs it: back to 0.1.0,
	// whose binary the upgrade removed.
	pin := func(ref string) string {
		out, err := exec.Command(agentd, "plugin", "--state-dir", state, "pin", "greeting", "--release", ref).CombinedOutput()
		if err != nil {
			t.Fatalf("agentd plugin pin --release %s: %v\n%s", ref, err, out)
		}
		return string(out)
	}
	installReg := "oci:" + filepath.Join(state, "registry", "plugins", "greeting") + "@"
	if out := pin(installReg + strings.SplitN(ref1, "@", 2)[1]); !strings.Contains(out, "the next job of type greeting installs it") {
		t.Fatalf("pin --release: %s", out)
	}
	job, log = greetingPlan(t, ims, "acme")
	if job.GetState() != imsv1.JobState_JOB_STATE_SUCCEEDED || !strings.Contains(log, "plugin greeting 0.1.0 started") {
		t.Fatalf("plan after pinning the 0.1.0 release: %s %q\n%s", job.GetState(), job.GetError(), log)
	}
	// Pinned to the release signed by another key (the refused install
	// left it in the install registry): the job fails saying why.
	pin(installReg + strings.SplitN(ref3, "@", 2)[1])
	job, _ = greetingPlan(t, ims, "acme")
	if job.GetState() != imsv1.JobState_JOB_STATE_FAILED || !strings.Contains(job.GetError(), "plugin greeting: install its pinned release") ||
		!strings.Contains(job.GetError(), "refused: plugin greeting 0.3.0") || !strings.Contains(job.GetError(), "no signature by a trusted key") {
		t.Fatalf("plan pinned to a release signed by another key: %s %q", job.GetState(), job.GetError())
	}
	if entries, _ := os.ReadDir(filepath.Join(state, "plugins")); len(entries) != 1 {
		t.Fatalf("installed after the refusal: %v", entries)
	}
	// Another job is refused the same release for the same reason.
	if job, _ = greetingPlan(t, ims, "acme"); job.GetState() != imsv1.JobState_JOB_STATE_FAILED {
		t.Fatalf("the second plan pinned to the refused release: %s %q", job.GetState(), job.GetError())
	}
	// The refusal is in the agent's journal once, as a job's refused
	// artifact is (supply_chain.refused), naming the type, release,
	// version, digest and rule; and in imsd's audit chain once, from the
	// agent's report (agent.plugin_refused).
	digest3 := strings.SplitN(ref3, "@", 2)[1]
	rs, err := auditlog.ReadFile(filepath.Join(auditlog.Dir(state), auditlog.AgentFile))
	if err != nil {
		t.Fatal(err)
	}
	// The refused agentd plugin install of 0.3.0 is there too, written by
	// the command while the agent ran: one chain.
	if p := auditchain.Verify(rs); p != nil {
		t.Fatalf("the agent's journal: %v", p)
	}
	var refusals, installRefusals []map[string]string
	for _, r := range rs {
		if r.Kind == "supply_chain.refused" && r.Subject == "plugin:greeting" {
			var d map[string]string
			if err := json.Unmarshal([]byte(r.Data), &d); err != nil {
				t.Fatal(err)
			}
			if d["command"] == "agentd plugin install" {
				installRefusals = append(installRefusals, d)
			} else {
				refusals = append(refusals, d)
			}
		}
	}
	if len(installRefusals) != 1 || installRefusals[0]["version"] != "0.3.0" || installRefusals[0]["digest"] != digest3 ||
		installRefusals[0]["artifact"] != strings.TrimPrefix(ref3, "oci://") || !strings.Contains(installRefusals[0]["reason"], "no signature by a trusted key") {
		t.Fatalf("the agent's journal of the refused install: %v", installRefusals)
	}
	if len(refusals) != 1 || refusals[0]["type"] != "greeting" || refusals[0]["version"] != "0.3.0" || refusals[0]["digest"] != digest3 ||
		refusals[0]["rule"] != "release" || !strings.Contains(refusals[0]["reason"], "no signature by a trusted key") {
		t.Fatalf("the agent's journal of the refusal (two refused jobs): %v", refusals)
	}
	imsdRefusals := func() []map[string]string {
		t.Helper()
		evs, err := ims.Admin().ListAuditEvents(t.Context(), connect.NewRequest(&imsv1.ListAuditEventsRequest{Install: "acme", Limit: 5000}))
		if err != nil {
			t.Fatal(err)
		}
		var out []map[string]string
		for _, e := range evs.Msg.Events {
			if e.Kind == "agent.plugin_refused" && e.Subject == "plugin:greeting" {
				var d map[string]string
				if err := json.Unmarshal([]byte(e.Data), &d); err != nil {
					t.Fatal(err)
				}
				out = append(out, d)
			}
		}
		return out
	}
	cluster.Eventually(t, 30*time.Second, "imsd to audit the plugin refusal", func() bool { return len(imsdRefusals()) > 0 })
	// The agent reports the refusal: the pinned release is refused, not
	// deployed, with the agent's reason.
	pluginRow(`"state": "refused"`, strings.SplitN(ref3, "@", 2)[1], `"rules": [`, `"release"`,
		"release: plugin greeting 0.3.0", "no signature by a trusted key")
	if got := imsdRefusals(); len(got) != 1 || got[0]["component_type"] != "greeting" || got[0]["version"] != "0.3.0" ||
		got[0]["supply_chain"] != "refused" || !strings.Contains(got[0]["supply_chain_artifact"], digest3) ||
		!strings.HasPrefix(got[0]["supply_chain_failed"], "release: plugin greeting 0.3.0") {
		t.Fatalf("imsd's audit of the refusal: %v", got)
	}
	cli.Run(0, "audit", "verify", "--install", "acme") // the chain, with the record, verifies
	// The history keeps both verdicts: 0.1.0 verified, 0.3.0 refused.
	hist := cli.Run(0, "install", "artifacts", "acme", "--history", "--kind", "plugin")
	var v1, v3 bool
	for _, l := range strings.Split(hist, "\n") {
		v1 = v1 || (strings.Contains(l, "type greeting") && strings.Contains(l, " 0.1.0") && strings.Contains(l, "verified"))
		v3 = v3 || (strings.Contains(l, "type greeting") && strings.Contains(l, "refused") && strings.Contains(l, "release"))
	}
	if !v1 || !v3 {
		t.Fatalf("install artifacts --history --kind plugin:\n%s", hist)
	}

	// The running agent recorded both installs in its journal.
	rs, err = auditlog.ReadFile(filepath.Join(auditlog.Dir(state), auditlog.AgentFile))
	if err != nil {
		t.Fatal(err)
	}
	var pinned []string
	for _, r := range rs {
		if r.Kind == "plugin.pinned" && r.Subject == "plugin:greeting" {
			pinned = append(pinned, r.Data)
		}
	}
	if len(pinned) < 4 || !strings.Contains(pinned[0], "0.1.0") || !strings.Contains(pinned[1], "0.2.0") || !strings.Contains(pinned[1], strings.SplitN(ref2, "@", 2)[1]) {
		t.Fatalf("the agent's journal of greeting's pins: %q", pinned)
	}
}

// The custody path of a plugin release: published (signed with imsd's
// key) to the vendor's source registry, synced into the vendor registry
// by the build agent (byoc build sync, recorded as a build), deployed
// into the install registry by an image component with the deploy's
// one-time grant (lineage in byoc install images), and installed from
// there by agentd plugin install, which copies nothing and verifies the
// signature that travelled with it as a referrer; the agent's next job
// of the type runs it (issue 29).
func TestPluginReleaseThroughCustody(t *testing.T) {
	skipShort(t)
	c := startCustody(t)
	key := filepath.Join(c.ims.DataDir, server.SigningKeyFileName)
	out := c.cli.Run(0, "plugin", "publish", buildGreetingVersion(t, "0.1.0"), "--name", "greeting", "--version", "0.1.0",
		"--to", c.source.Host+"/plugins/greeting", "--signing-key", key, "-o", "json")
	var rel struct{ Reference, Digest string }
	if err := json.Unmarshal([]byte(out), &rel); err != nil || rel.Digest == "" {
		t.Fatalf("publish: %v\n%s", err, out)
	}
	b := c.build(t, "plugins/greeting@"+rel.Digest, "plugins/greeting")
	if b.Digest != rel.Digest {
		t.Fatalf("build %s, want the release's digest %s", b.Digest, rel.Digest)
	}
	c.cli.Run(0, "plugin", "register", rel.Reference)

	installReg := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	pushed := c.cli.PushApp(shopApp("plugins/greeting@" + b.Digest))
	state := filepath.Join(t.TempDir(), "agent")
	cluster.StartAgent(t, c.ims.URL(), pushed.EnrollToken(t), state, "--install-registry", "http://"+installReg.Host)
	waitConnected(t, c.ims, "acme")
	if wf := runWorkflow(t, c, imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION); wf.State != imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED {
		t.Fatalf("provision ended %v:\n%s", wf.State, c.cli.Run(-1, "workflow", "get", wf.Id))
	}
	if out := c.cli.Run(0, "install", "images", "acme"); !strings.Contains(out, "vendor   plugins/greeting@"+b.Digest) ||
		!strings.Contains(out, "install  "+installReg.Host+"/plugins/greeting@"+b.Digest) {
		t.Fatalf("install images:\n%s", out)
	}

	ref := "oci://" + installReg.Host + "/plugins/greeting@" + b.Digest
	res, err := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), "plugin", "--state-dir", state,
		"--install-registry", "http://"+installReg.Host, "install", ref).CombinedOutput()
	if err != nil || !strings.Contains(string(res), "installed greeting 0.1.0 ("+b.Digest) || !strings.Contains(string(res), "verified") {
		t.Fatalf("agentd plugin install from the install registry: %v\n%s", err, res)
	}
	job, log := greetingPlan(t, c.ims, "acme")
	if job.GetState() != imsv1.JobState_JOB_STATE_SUCCEEDED || !strings.Contains(log, "plugin greeting 0.1.0 started") {
		t.Fatalf("plan: %s %q\n%s", job.GetState(), job.GetError(), log)
	}
}
