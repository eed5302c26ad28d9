package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os/exec"
	"path/filepath"
	"regexp"
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
// and packages (an image, a Terraform module) (agentd --role build
// --artifact-signing-key, here imsd's job signing
// key); the install's customer requires signatures (agentd policy
// supply-chain --require-signature, in the agent's signed
// permissions.json, which imsd has no way to write). The signed image is
// verified and deployed, its signature carried into the install
// registry; the same kind of image pushed to the vendor registry
// unsigned, or signed by another key, is refused before its plugin runs
// (an image deploy has no separate plan; its apply is refused), and so is
// a module put into the install registry by hand, at the terraform
// component's plan: the
// job's error names the artifact, its digest and the rule, the agent's
// journal records it, and the install registry never gets it. Under
// --mode warn the unsigned image is deployed and the warning journalled.
func TestSupplyChainRequireSignature(t *testing.T) {
	skipShort(t)
	c := startCustodyBuild(t, fast, "--artifact-signing-key", "IMSD-SIGNING-KEY")
	ctx := context.Background()
	pushImage(t, repo(t, c.source.Host, "library/hello", ""), "1.0", 1, 32<<10)
	b1 := c.build(t, "library/hello:1.0", "hello")
	// A Terraform module packaged (and signed) by the build agent, which
	// an image component brings into the install registry, with its
	// signature, for the terraform component that runs it.
	mod := filepath.Join(t.TempDir(), "network")
	cluster.WriteApp(t, mod, map[string]string{"main.tf": "resource \"terraform_data\" \"n\" {}\n"})
	bmod := printedBuild(t, c.cli.Run(0, "build", "package", mod, "--kind", "terraform", "--repo", "modules/network", "--wait", "-o", "json"))
	app := func(web, module string) map[string]string {
		a := shopApp(web)
		a["components/netmod.toml"] = "type = \"image\"\n[config]\nsource = \"modules/network@" + bmod.Digest + "\"\n"
		a["components/net.toml"] = "type = \"terraform\"\ndependencies = [\"netmod\"]\n[config]\nmodule = \"" + module + "\"\n"
		return a
	}

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
	pushed := c.cli.PushApp(app("hello@"+b1.Digest, "modules/network@"+bmod.Digest))
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

	md, err := repo(t, installReg.Host, "modules/network", "").Resolve(ctx, bmod.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ocisign.Verify(ctx, repo(t, installReg.Host, "modules/network", ""), md, ocisign.ArtifactType, "", "module", []ed25519.PublicKey{imsdPub}); err != nil {
		t.Fatalf("the module's signature did not travel into the install registry: %v", err)
	}

	// An unsigned module put into the install registry by hand.
	mod2 := filepath.Join(t.TempDir(), "network2")
	cluster.WriteApp(t, mod2, map[string]string{"main.tf": "resource \"terraform_data\" \"m\" {}\n"})
	out, err := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), "module", "push", "--state-dir", state,
		"--install-registry", "http://"+installReg.Host, mod2, "modules/byhand:0.1.0").CombinedOutput()
	byHand := regexp.MustCompile(`(sha256:[0-9a-f]{64})`).FindString(string(out))
	if err != nil || byHand == "" {
		t.Fatalf("agentd module push: %v\n%s", err, out)
	}

	for _, bad := range []struct{ name, web, module, artifact, digest, want string }{
		{"unsigned", "rogue@" + unsigned.Digest.String(), "modules/network@" + bmod.Digest, "rogue@" + unsigned.Digest.String(), unsigned.Digest.String(), "it has no signature"},
		{"foreign", "rogue@" + foreign.Digest.String(), "modules/network@" + bmod.Digest, "rogue@" + foreign.Digest.String(), foreign.Digest.String(), "(not trusted)"},
		{"module", "hello@" + b1.Digest, "modules/byhand@" + byHand, "modules/byhand@" + byHand, byHand, "it has no signature"},
	} {
		c.cli.PushApp(app(bad.web, bad.module))
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
		for _, w := range []string{"rule require-signature", bad.artifact, bad.want, "refused before the plugin ran"} {
			if !strings.Contains(failed.Error, w) {
				t.Fatalf("%s: the job's error %q lacks %q", bad.name, failed.Error, w)
			}
		}
		if _, err := repo(t, installReg.Host, "rogue", "").Resolve(ctx, bad.digest); bad.name != "module" && err == nil {
			t.Fatalf("%s: the install registry holds the refused artifact", bad.name)
		}
	}
	// Mode warn: the unsigned image is deployed, with a warning in the
	// job's log and the agent's journal.
	if out := policy("--mode", "warn"); !strings.Contains(out, "otherwise warn") {
		t.Fatalf("policy --mode warn: %s", out)
	}
	c.cli.PushApp(app("rogue@"+unsigned.Digest.String(), "modules/network@"+bmod.Digest))
	if wf := runWorkflow(t, c, imsv1.WorkflowKind_WORKFLOW_KIND_UPDATE); wf.State != imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED {
		t.Fatalf("deploy under mode warn ended %v:\n%s", wf.State, c.cli.Run(-1, "workflow", "get", wf.Id))
	}
	if _, err := repo(t, installReg.Host, "rogue", "").Resolve(ctx, unsigned.Digest.String()); err != nil {
		t.Fatalf("mode warn: the install registry lacks the deployed image: %v", err)
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
	if got := strings.Join(kinds, ","); !strings.Contains(got, "supply_chain.verified") || strings.Count(got, "supply_chain.refused") < 3 ||
		!strings.Contains(got, "supply_chain.warned") {
		t.Fatalf("journal: %s", got)
	}
}
