package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/internal/ocisign"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// TestSupplyChainRequireSignature: the build agent signs what it syncs
// (agentd --role build --artifact-signing-key, here imsd's job signing
// key); the install's customer requires signatures (agentd policy
// supply-chain --require-signature, in the agent's signed
// permissions.json, which imsd has no way to write). The signed image is
// verified and deployed, its signature carried into the install
// registry; the same kind of image pushed to the vendor registry
// unsigned, or signed by another key, is refused before its plugin runs
// (an image deploy has no separate plan; its apply is refused): the
// job's error names the artifact, its digest and the rule, the agent's
// journal records it, and the install registry never gets it.
func TestSupplyChainRequireSignature(t *testing.T) {
	skipShort(t)
	c := startCustodyBuild(t, fast, "--artifact-signing-key", "IMSD-SIGNING-KEY")
	ctx := context.Background()
	pushImage(t, repo(t, c.source.Host, "library/hello", ""), "1.0", 1, 32<<10)
	b1 := c.build(t, "library/hello:1.0", "hello")

	// Unsigned and foreign-signed images, put into the vendor registry
	// behind the build agent's back.
	rogue := repo(t, c.vendor.Host, "rogue", c.mint(t, "repository:rogue:pull,push"))
	unsigned := pushImage(t, rogue, "u", 2, 32<<10)
	foreign := pushImage(t, rogue, "f", 3, 32<<10)
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	if _, err := ocisign.Sign(ctx, rogue, foreign, ocisign.ArtifactType, "", otherKey); err != nil {
		t.Fatal(err)
	}

	installReg := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	pushed := c.cli.PushApp(shopApp("hello@" + b1.Digest))
	state := filepath.Join(t.TempDir(), "agent")
	cluster.StartAgent(t, c.ims.URL(), pushed.EnrollToken(t), state, "--install-registry", "http://"+installReg.Host)
	waitConnected(t, c.ims, "acme")
	policy := func(args ...string) string {
		out, err := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), append([]string{"policy", "--state-dir", state, "supply-chain"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("agentd policy supply-chain %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := policy("--require-signature"); !strings.Contains(out, "signature required (by imsd's pinned keys); otherwise refuse") {
		t.Fatalf("policy: %s", out)
	}

	if wf := runWorkflow(t, c, imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION); wf.State != imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED {
		t.Fatalf("provision of the signed build ended %v:\n%s", wf.State, c.cli.Run(-1, "workflow", "get", wf.Id))
	}
	inst := repo(t, installReg.Host, "hello", "")
	d, err := inst.Resolve(ctx, b1.Digest)
	if err != nil {
		t.Fatal(err)
	}
	imsdKey, err := ocisign.ReadPrivateKey(filepath.Join(c.ims.DataDir, "signing.key"))
	if err != nil {
		t.Fatal(err)
	}
	imsdPub := imsdKey.Public().(ed25519.PublicKey)
	if _, err := ocisign.Verify(ctx, inst, d, ocisign.ArtifactType, "", "hello", []ed25519.PublicKey{imsdPub}); err != nil {
		t.Fatalf("the signature did not travel into the install registry: %v", err)
	}

	for _, bad := range []struct{ name, digest, want string }{
		{"unsigned", unsigned.Digest.String(), "it has no signature"},
		{"foreign", foreign.Digest.String(), "(not trusted)"},
	} {
		c.cli.PushApp(shopApp("rogue@" + bad.digest))
		wf := runWorkflow(t, c, imsv1.WorkflowKind_WORKFLOW_KIND_UPDATE)
		if wf.State != imsv1.WorkflowState_WORKFLOW_STATE_FAILED {
			t.Fatalf("%s: the deploy ended %v", bad.name, wf.State)
		}
		jobs, err := c.ims.Admin().ListJobs(ctx, connect.NewRequest(&imsv1.ListJobsRequest{Install: "acme"}))
		if err != nil {
			t.Fatal(err)
		}
		var failed *imsv1.Job
		for _, j := range jobs.Msg.Jobs {
			if j.State == imsv1.JobState_JOB_STATE_FAILED && strings.Contains(j.Error, bad.digest) {
				failed = j
			}
		}
		if failed == nil {
			t.Fatalf("%s: no failed job names %s", bad.name, bad.digest)
		}
		for _, w := range []string{"rule require-signature", "rogue@" + bad.digest, bad.want, "refused before the plugin ran"} {
			if !strings.Contains(failed.Error, w) {
				t.Fatalf("%s: the job's error %q lacks %q", bad.name, failed.Error, w)
			}
		}
		if _, err := repo(t, installReg.Host, "rogue", "").Resolve(ctx, bad.digest); err == nil {
			t.Fatalf("%s: the install registry holds the refused artifact", bad.name)
		}
	}
	rs, err := auditlog.ReadFile(filepath.Join(auditlog.Dir(state), auditlog.AgentFile))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, r := range rs {
		if strings.HasPrefix(r.Kind, "supply_chain.") {
			kinds = append(kinds, r.Kind)
		}
	}
	if got := strings.Join(kinds, ","); !strings.Contains(got, "supply_chain.verified") || strings.Count(got, "supply_chain.refused") < 2 {
		t.Fatalf("journal: %s", got)
	}
}
