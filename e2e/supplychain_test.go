package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"connectrpc.com/connect"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/internal/attest"
	"github.com/byoc-dev/byoc/internal/auditchain"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/internal/ocisign"
	"github.com/byoc-dev/byoc/rpc/agentproto"
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
	sc := startSupplyChain(t, "--artifact-signing-key", "IMSD-SIGNING-KEY")
	c, b1, bmod, bchart, app, installReg, state, policy := sc.custody, sc.image, sc.module, sc.chart, sc.app, sc.installReg, sc.state, sc.policy
	ctx := context.Background()
	// Unsigned and foreign-signed images, put into the vendor registry
	// behind the build agent's back.
	rogue := repo(t, c.vendor.Host, "rogue", c.mint(t, "repository:rogue:pull,push"))
	unsigned := pushImage(t, rogue, "u", 2, 32<<10)
	foreign := pushImage(t, rogue, "f", 3, 32<<10)
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	if _, err := ocisign.Sign(ctx, rogue, foreign, ocisign.ArtifactType, "", otherKey); err != nil {
		t.Fatal(err)
	}
	imsdKey, err := ocisign.ReadPrivateKey(filepath.Join(c.ims.DataDir, "signing.key"))
	if err != nil {
		t.Fatal(err)
	}
	imsdPub := imsdKey.Public().(ed25519.PublicKey)
	// Signed with the vendor's key, but not by the build agent: no
	// provenance.
	unattested := pushImage(t, rogue, "a", 4, 32<<10)
	if _, err := ocisign.Sign(ctx, rogue, unattested, ocisign.ArtifactType, "", imsdKey); err != nil {
		t.Fatal(err)
	}

	wantPolicy := "signature required, attestation slsa-provenance:level>=2 required (by imsd's pinned keys); otherwise refuse"
	if out := policy(t, "--require-signature", "--require-attestation", "slsa-provenance:level>=2"); !strings.Contains(out, wantPolicy) {
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

	// The signatures and the build agent's provenance travelled into the
	// install registry with the image, the module and the chart.
	for _, a := range []struct{ name, digest string }{{"hello", b1.Digest}, {"modules/network", bmod.Digest}, {"charts/api", bchart.Digest}} {
		r := repo(t, installReg.Host, a.name, "")
		d, err := r.Resolve(ctx, a.digest)
		if err != nil {
			t.Fatalf("%s: %v", a.name, err)
		}
		if _, err := ocisign.Verify(ctx, r, d, ocisign.ArtifactType, "", a.name, []ed25519.PublicKey{imsdPub}); err != nil {
			t.Fatalf("%s: the signature did not travel: %v", a.name, err)
		}
		found, err := attest.Find(ctx, r, d, []ed25519.PublicKey{imsdPub})
		if err != nil || len(found.Has(attest.SLSAProvenanceV1)) != 1 {
			t.Fatalf("%s: the provenance did not travel: %+v %v", a.name, found, err)
		}
	}
	// imsd stored what the agent verified; byoc install images shows it.
	if out := c.cli.Run(0, "install", "images", "acme"); !strings.Contains(out, "verified VERIFIED  signed by key "+agentproto.KeyID(imsdPub)+"; attested: slsa-provenance") {
		t.Fatalf("install images:\n%s", out)
	}
	if out := c.cli.Run(0, "install", "images", "acme", "-o", "yaml"); !strings.Contains(out, "verdict: verified") || !strings.Contains(out, "https://slsa.dev/provenance/v1") {
		t.Fatalf("install images -o yaml:\n%s", out)
	}
	// byoc install artifacts: every kind, the module too, each with the
	// key that verified it.
	short := func(d string) string { return strings.TrimPrefix(d, "sha256:")[:12] }
	keyID := agentproto.KeyID(imsdPub)
	if out := c.cli.Run(0, "install", "artifacts", "acme"); !regexp.MustCompile(`(?m)^net +module +modules/network +`+short(bmod.Digest)+` +verified +- +`+keyID+` `).MatchString(out) ||
		!regexp.MustCompile(`(?m)^netmod +image +modules/network +`+short(bmod.Digest)+` +verified +- +`+keyID+` `).MatchString(out) {
		t.Fatalf("install artifacts:\n%s", out)
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

	// Another module by hand, given the signed module's signature and
	// provenance: the referrers copied, their subject swapped.
	mod3 := filepath.Join(t.TempDir(), "network3")
	cluster.WriteApp(t, mod3, map[string]string{"main.tf": "resource \"terraform_data\" \"s\" {}\n"})
	out, err = exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), "module", "push", "--state-dir", state,
		"--install-registry", "http://"+installReg.Host, mod3, "modules/network:swapped").CombinedOutput()
	swapped := regexp.MustCompile(`(sha256:[0-9a-f]{64})`).FindString(string(out))
	if err != nil || swapped == "" {
		t.Fatalf("agentd module push: %v\n%s", err, out)
	}
	swapRefs(t, repo(t, installReg.Host, "modules/network", ""), md, swapped)
	// A chart by hand, unsigned, for a helm component.
	chart2 := filepath.Join(t.TempDir(), "api2")
	cluster.WriteApp(t, chart2, map[string]string{"Chart.yaml": "apiVersion: v2\nname: api2\nversion: 0.1.0\n"})
	out, err = exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), "module", "push", "--kind", "helm", "--state-dir", state,
		"--install-registry", "http://"+installReg.Host, chart2, "charts/byhand:0.1.0").CombinedOutput()
	byHandChart := regexp.MustCompile(`(sha256:[0-9a-f]{64})`).FindString(string(out))
	if err != nil || byHandChart == "" {
		t.Fatalf("agentd module push --kind helm: %v\n%s", err, out)
	}

	sig := "rule require-signature"
	prov := "require-attestation slsa-provenance:level>=2"
	for _, bad := range []struct {
		name, web, module, chart, artifact, digest string
		want                                       []string
	}{
		{"unsigned", "rogue@" + unsigned.Digest.String(), "modules/network@" + bmod.Digest, "", "rogue@" + unsigned.Digest.String(), unsigned.Digest.String(), []string{sig, prov, "it has no signature"}},
		{"foreign", "rogue@" + foreign.Digest.String(), "modules/network@" + bmod.Digest, "", "rogue@" + foreign.Digest.String(), foreign.Digest.String(), []string{sig, "(not trusted)"}},
		{"unattested", "rogue@" + unattested.Digest.String(), "modules/network@" + bmod.Digest, "", "rogue@" + unattested.Digest.String(), unattested.Digest.String(), []string{"rule " + prov, "no SLSA provenance signed by a trusted key"}},
		{"module", "hello@" + b1.Digest, "modules/byhand@" + byHand, "", "modules/byhand@" + byHand, byHand, []string{sig, "it has no signature"}},
		{"swapped", "hello@" + b1.Digest, "modules/network@" + swapped, "", "modules/network@" + swapped, swapped, []string{sig, prov, "the signature does not match the artifact", "its subject is not the artifact"}},
		{"chart", "hello@" + b1.Digest, "modules/network@" + bmod.Digest, "charts/byhand@" + byHandChart, "charts/byhand@" + byHandChart, byHandChart, []string{sig, "it has no signature"}},
	} {
		if bad.chart != "" {
			c.cli.PushApp(app(bad.web, bad.module, bad.chart))
		} else {
			c.cli.PushApp(app(bad.web, bad.module))
		}
		wf := runWorkflow(t, c, imsv1.WorkflowKind_WORKFLOW_KIND_UPDATE)
		if wf.State != imsv1.WorkflowState_WORKFLOW_STATE_FAILED {
			t.Fatalf("%s: the deploy ended %v", bad.name, wf.State)
		}
		failed := sc.failedJobs(t, bad.digest)
		if len(failed) == 0 {
			t.Fatalf("%s: no failed job names %s", bad.name, bad.digest)
		}
		for _, w := range append(bad.want, bad.artifact, "refused before the plugin ran") {
			if e := failed[len(failed)-1].Error; !strings.Contains(e, w) {
				t.Fatalf("%s: the job's error %q lacks %q", bad.name, e, w)
			}
		}
		if _, err := repo(t, installReg.Host, "rogue", "").Resolve(ctx, bad.digest); strings.HasPrefix(bad.artifact, "rogue@") && err == nil {
			t.Fatalf("%s: the install registry holds the refused artifact", bad.name)
		}
	}
	// The refused chart of a helm component never deployed is listed with
	// its state and rule; the module still runs its signed digest.
	var arts []struct {
		Component, Kind, Reference, Digest, State string
		Rules                                     []string
		Deployed                                  bool
	}
	if err := json.Unmarshal([]byte(c.cli.Run(0, "install", "artifacts", "acme", "-o", "json")), &arts); err != nil {
		t.Fatal(err)
	}
	var chartRow, moduleRow bool
	for _, a := range arts {
		switch {
		case a.Component == "api" && a.Kind == "chart" && a.Digest == byHandChart && a.State == "refused" && !a.Deployed &&
			len(a.Rules) > 0 && a.Rules[0] == "require-signature":
			chartRow = true
		case a.Component == "net" && a.Kind == "module" && a.Digest == bmod.Digest && a.Deployed:
			moduleRow = true
		}
	}
	if !chartRow || !moduleRow {
		t.Fatalf("install artifacts -o json: chart row %v, module row %v: %+v", chartRow, moduleRow, arts)
	}
	if out := c.cli.Run(0, "install", "artifacts", "acme", "--kind", "chart"); !regexp.MustCompile(`(?m)^api +chart +charts/byhand \(not deployed\) +`+short(byHandChart)+` +refused +require-signature`).MatchString(out) ||
		strings.Contains(out, "module") {
		t.Fatalf("install artifacts --kind chart:\n%s", out)
	}
	// The history keeps what the latest replaced: net's signed module
	// verified, then the unsigned and the swapped ones refused.
	if out := c.cli.Run(0, "install", "artifacts", "acme", "--history", "--kind", "module"); !regexp.MustCompile(`(?m)^net +module +modules/network +`+short(bmod.Digest)+` +verified +- +`+keyID+` `).MatchString(out) ||
		!regexp.MustCompile(`(?m)^net +module +modules/byhand +`+short(byHand)+` +refused +require-signature`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^net +module +modules/network +`+short(swapped)+` +refused +require-signature`).MatchString(out) {
		t.Fatalf("install artifacts --history --kind module:\n%s", out)
	}
	// imsd's audit chain records each refusal with the rule.
	if refusals := sc.imsdRefusals(t); len(refusals) < 6 {
		t.Fatalf("imsd's chain records %d refused artifacts, want 6: %v", len(refusals), refusals)
	}
	// Nothing imsd did changed the policy: only the customer's command
	// can (permissions.json is signed with the agent's key).
	if out := policy(t); !strings.Contains(out, wantPolicy) {
		t.Fatalf("policy after the vendor's deploys: %s", out)
	}

	// Mode warn: the unsigned image is deployed, with a warning in the
	// job's log and the agent's journal.
	if out := policy(t, "--mode", "warn"); !strings.Contains(out, "otherwise warn") {
		t.Fatalf("policy --mode warn: %s", out)
	}
	c.cli.PushApp(app("rogue@"+unsigned.Digest.String(), "modules/network@"+bmod.Digest))
	if wf := runWorkflow(t, c, imsv1.WorkflowKind_WORKFLOW_KIND_UPDATE); wf.State != imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED {
		t.Fatalf("deploy under mode warn ended %v:\n%s", wf.State, c.cli.Run(-1, "workflow", "get", wf.Id))
	}
	if _, err := repo(t, installReg.Host, "rogue", "").Resolve(ctx, unsigned.Digest.String()); err != nil {
		t.Fatalf("mode warn: the install registry lacks the deployed image: %v", err)
	}
	var kinds []string
	for _, r := range sc.journal(t, "supply_chain.") {
		kinds = append(kinds, r.Kind)
	}
	if got := strings.Join(kinds, ","); !strings.Contains(got, "supply_chain.verified") || strings.Count(got, "supply_chain.refused") < 3 ||
		!strings.Contains(got, "supply_chain.warned") {
		t.Fatalf("journal: %s", got)
	}
}

// supplyChain is a vendor whose build agent (started with buildArgs)
// synced an image and packaged a Terraform module and a Helm chart (its
// builds), and the install acme's agent, enrolled with an app deploying
// the three (sc.app), connected, with its own install registry; its
// supply-chain policy is still the default.
type supplyChain struct {
	*custody
	builds
	installReg *ocitest.Registry
	// state is the install agent's state directory.
	state string
}

func startSupplyChain(t *testing.T, buildArgs ...string) *supplyChain {
	t.Helper()
	sc := &supplyChain{custody: startCustodyBuild(t, fast, buildArgs...)}
	sc.builds = sc.buildAll(t, 1)
	sc.installReg = ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	pushed := sc.cli.PushApp(sc.app("hello@"+sc.image.Digest, "modules/network@"+sc.module.Digest))
	sc.state = filepath.Join(t.TempDir(), "agent")
	cluster.StartAgent(t, sc.ims.URL(), pushed.EnrollToken(t), sc.state, "--install-registry", "http://"+sc.installReg.Host)
	waitConnected(t, sc.ims, "acme")
	return sc
}

// builds are what the build agent built of one version of the shop app.
type builds struct{ image, module, chart *imsv1.Build }

// buildAll has the build agent build version v of the shop app's
// artifacts: it syncs an image (hello:V.0) and packages a Terraform
// module (modules/network) and a Helm chart (charts/api 1.V.0), each
// signed and attested as the build agent's flags say.
func (c *custody) buildAll(t *testing.T, v int) builds {
	t.Helper()
	var b builds
	pushImage(t, repo(t, c.source.Host, "library/hello", ""), fmt.Sprintf("%d.0", v), uint64(v), 32<<10)
	b.image = c.build(t, fmt.Sprintf("library/hello:%d.0", v), "hello")
	// A Terraform module, which an image component brings into the
	// install registry, with its referrers, for the terraform component
	// that runs it.
	mod := filepath.Join(t.TempDir(), "network")
	cluster.WriteApp(t, mod, map[string]string{"main.tf": fmt.Sprintf("resource \"terraform_data\" \"n%d\" {}\n", v)})
	b.module = printedBuild(t, c.cli.Run(0, "build", "package", mod, "--kind", "terraform", "--repo", "modules/network", "--wait", "-o", "json"))
	// A Helm chart, brought into the install registry the same way.
	chart := filepath.Join(t.TempDir(), "api")
	cluster.WriteApp(t, chart, map[string]string{"Chart.yaml": fmt.Sprintf("apiVersion: v2\nname: api\nversion: 1.%d.0\n", v), "templates/cm.yaml": "kind: ConfigMap\n"})
	b.chart = printedBuild(t, c.cli.Run(0, "build", "package", chart, "--kind", "helm", "--repo", "charts/api", "--wait", "-o", "json"))
	return b
}

// app is the shop app: an image component web, b's module brought into
// the install registry by an image component (netmod) for a terraform
// component (net) running module, b's chart the same way (chartimg), and
// with helmChart a helm component (api) deploying it.
func (b builds) app(web, module string, helmChart ...string) map[string]string {
	a := shopApp(web)
	a["components/netmod.toml"] = "type = \"image\"\n[config]\nsource = \"modules/network@" + b.module.Digest + "\"\n"
	a["components/net.toml"] = "type = \"terraform\"\ndependencies = [\"netmod\"]\n[config]\nmodule = \"" + module + "\"\n"
	a["components/chartimg.toml"] = "type = \"image\"\n[config]\nsource = \"charts/api@" + b.chart.Digest + "\"\n"
	if len(helmChart) > 0 {
		a["components/api.toml"] = "type = \"helm\"\ndependencies = [\"chartimg\"]\n[config]\nrelease = \"api\"\nnamespace = \"shop\"\nchart = \"" + helmChart[0] + "\"\n"
	}
	return a
}

// policy runs the customer's agentd policy supply-chain ARGS on the
// install agent's state directory and returns what it printed.
func (sc *supplyChain) policy(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), append([]string{"policy", "--state-dir", sc.state, "supply-chain"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("agentd policy supply-chain %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// journal lists the install agent's journal records whose kind begins
// with prefix, in order.
func (sc *supplyChain) journal(t *testing.T, prefix string) []auditchain.Record {
	t.Helper()
	rs, err := auditlog.ReadFile(filepath.Join(auditlog.Dir(sc.state), auditlog.AgentFile))
	if err != nil {
		t.Fatal(err)
	}
	var out []auditchain.Record
	for _, r := range rs {
		if strings.HasPrefix(r.Kind, prefix) {
			out = append(out, r)
		}
	}
	return out
}

// jobs lists acme's jobs.
func (sc *supplyChain) jobs(t *testing.T) []*imsv1.Job {
	t.Helper()
	jobs, err := sc.ims.Admin().ListJobs(t.Context(), connect.NewRequest(&imsv1.ListJobsRequest{Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	return jobs.Msg.Jobs
}

// imsdRefusals reads acme's audit chain in imsd: the refused artifacts,
// each with the rules it failed.
func (sc *supplyChain) imsdRefusals(t *testing.T) map[string]string {
	t.Helper()
	evs, err := sc.ims.Admin().ListAuditEvents(t.Context(), connect.NewRequest(&imsv1.ListAuditEventsRequest{Install: "acme", Limit: 5000}))
	if err != nil {
		t.Fatal(err)
	}
	refusals := map[string]string{}
	for _, e := range evs.Msg.Events {
		var data map[string]string
		if err := json.Unmarshal([]byte(e.Data), &data); err != nil {
			t.Fatal(err)
		}
		if data["supply_chain"] == "refused" && strings.Contains(data["supply_chain_failed"], "require-") {
			refusals[data["supply_chain_artifact"]] = data["supply_chain_failed"]
		}
	}
	return refusals
}

// failedJobs lists acme's failed jobs whose error contains s, in
// ListJobs' order.
func (sc *supplyChain) failedJobs(t *testing.T, s string) []*imsv1.Job {
	t.Helper()
	var failed []*imsv1.Job
	for _, j := range sc.jobs(t) {
		if j.State == imsv1.JobState_JOB_STATE_FAILED && strings.Contains(j.Error, s) {
			failed = append(failed, j)
		}
	}
	return failed
}

// swapRefs copies the referrers of from (its signatures and
// attestations) in r onto the manifest to, their subject swapped: a
// registry's content changed behind the build agent's back.
func swapRefs(t *testing.T, r *ocicopy.Repo, from ocispec.Descriptor, to string) {
	t.Helper()
	ctx := t.Context()
	target, err := r.Resolve(ctx, to)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := r.Referrers(ctx, from, 64)
	if err != nil || len(refs) < 2 {
		t.Fatalf("referrers of %s: %v %v", from.Digest, refs, err)
	}
	for _, ref := range refs {
		raw, err := content.FetchAll(ctx, r, ref)
		if err != nil {
			t.Fatal(err)
		}
		var m ocispec.Manifest
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		m.Subject = &ocispec.Descriptor{MediaType: target.MediaType, Digest: target.Digest, Size: target.Size}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Push(ctx, content.NewDescriptorFromBytes(m.MediaType, b), bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
}
