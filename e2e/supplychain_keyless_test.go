package e2e

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/internal/attest"
	"github.com/byoc-dev/byoc/internal/attest/keylesstest"
	"github.com/byoc-dev/byoc/internal/ocisign"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// TestSupplyChainKeyless: the build agent signs its attestations
// keylessly only (agentd --role build --keyless-fulcio-url,
// --keyless-tsa-url, --keyless-token-file; no --artifact-signing-key):
// with its workload OIDC token (from a test issuer) it gets a fake
// Fulcio-compatible CA's certificate for an ephemeral key and a fake
// TSA's timestamp, all on loopback. The install's customer requires SLSA
// provenance and trusts the build agent's identity and the CA's trusted
// root (agentd policy supply-chain --require-attestation
// slsa-provenance --identity issuer=...,subject=... --trusted-root FILE),
// no key of theirs: an image, a Terraform module and a Helm chart built by
// the build agent deploy, their keyless provenance carried into the
// install registry. Under an identity whose subject does not match, and
// under a trusted root of another CA, the deploy is refused before any
// plugin ran or any plan: the job's error names the artifact, its digest
// and the rule, the agent's journal and imsd's audit chain record it, and
// the policy is still the customer's.
func TestSupplyChainKeyless(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	e := keylesstest.New(t, 0)
	const subject = "https://kubernetes.io/namespaces/byoc/serviceaccounts/build-agent"
	if err := os.WriteFile(e.TokenFile, []byte(e.Issuer.Token(t, subject)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sc := startSupplyChain(t, "--keyless-fulcio-url", e.Fulcio.URL, "--keyless-tsa-url", e.TSA.URL+"/api/v1/timestamp",
		"--keyless-token-file", e.TokenFile)
	dir := t.TempDir()
	writeRoot := func(name string, ca keylesstest.CA) string {
		b, err := e.Root(t, ca).MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	rootFile, otherRoot := writeRoot("trusted_root.json", e.FulcioCA), writeRoot("other_root.json", keylesstest.NewCA(t, "other CA"))
	good := "issuer=" + e.Issuer.URL + `,subject=https://kubernetes\.io/namespaces/byoc/serviceaccounts/.*`
	wantPolicy := "attestation slsa-provenance required (by imsd's pinned keys and 1 keyless identit(y/ies)); otherwise refuse"
	if out := sc.policy(t, "--require-attestation", "slsa-provenance", "--identity", good, "--trusted-root", rootFile); !strings.Contains(out, wantPolicy) ||
		!strings.Contains(out, "trusted: keyless identity "+good) || strings.Contains(out, "(--key)") {
		t.Fatalf("policy: %s", out)
	}

	if wf := runWorkflow(t, sc.custody, imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION); wf.State != imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED {
		t.Fatalf("provision of the keylessly attested builds ended %v:\n%s", wf.State, sc.cli.Run(-1, "workflow", "get", wf.Id))
	}
	imsdKey, err := ocisign.ReadPrivateKey(filepath.Join(sc.ims.DataDir, "signing.key"))
	if err != nil {
		t.Fatal(err)
	}
	trust := attest.Trust{Root: e.Root(t, e.FulcioCA), Identities: []attest.Identity{{Issuer: e.Issuer.URL, Subject: subject}}}
	artifacts := map[string]string{"hello": sc.image.Digest, "modules/network": sc.module.Digest, "charts/api": sc.chart.Digest}
	for name, digest := range artifacts {
		r := repo(t, sc.installReg.Host, name, "")
		d, err := r.Resolve(ctx, digest)
		if err != nil {
			t.Fatalf("%s: not deployed into the install registry: %v", name, err)
		}
		// Keyless only: no signature by a key, a provenance whose
		// certificate names the build agent's identity.
		if _, err := ocisign.Verify(ctx, r, d, ocisign.ArtifactType, "", name, []ed25519.PublicKey{imsdKey.Public().(ed25519.PublicKey)}); err == nil {
			t.Fatalf("%s: signed by imsd's key, want keyless only", name)
		}
		f, err := attest.FindTrusted(ctx, r, d, trust)
		if err != nil || len(f.Has(attest.SLSAProvenanceV1)) != 1 || len(f.Rejected) != 0 {
			t.Fatalf("%s: the keyless provenance did not travel: %+v %v", name, f, err)
		}
	}
	// Each component's artifact was verified by its keyless signature
	// and provenance alone (no key: the signer is the build agent's
	// identity), the module again by the terraform component that ran
	// it.
	verified := map[string]string{}
	for _, r := range sc.journal(t, "supply_chain.verified") {
		var data map[string]string
		if err := json.Unmarshal([]byte(r.Data), &data); err != nil {
			t.Fatal(err)
		}
		if data["key_id"] == "keyless:"+e.Issuer.URL+":"+subject && data["attestations"] == attest.SLSAProvenanceV1 {
			verified[data["component"]] = data["artifact"]
		}
	}
	for comp, a := range map[string]string{"web": "hello@" + sc.image.Digest, "netmod": "modules/network@" + sc.module.Digest,
		"net": "modules/network@" + sc.module.Digest, "chartimg": "charts/api@" + sc.chart.Digest} {
		if verified[comp] != a {
			t.Fatalf("the agent's journal has no keyless verification of %s for %s: %v", a, comp, verified)
		}
	}

	// The customer's policy changed, the vendor's next version (built
	// and attested keylessly the same way) is refused.
	rule := "rule require-attestation slsa-provenance"
	var refusedArtifacts []string
	for i, bad := range []struct{ name, identity, root, want string }{
		{"another subject", "issuer=" + e.Issuer.URL + `,subject=https://kubernetes\.io/namespaces/other/.*`, rootFile, "the subject matches no trusted identity of that issuer"},
		{"another CA", good, otherRoot, "is not from a trusted certificate authority"},
	} {
		sc.policy(t, "--identity", bad.identity, "--trusted-root", bad.root)
		next := sc.buildAll(t, i+2)
		nextArtifacts := map[string]string{"hello": next.image.Digest, "modules/network": next.module.Digest, "charts/api": next.chart.Digest}
		before := map[string]bool{}
		for _, j := range sc.jobs(t) {
			before[j.Id] = true
		}
		sc.cli.PushApp(next.app("hello@"+next.image.Digest, "modules/network@"+next.module.Digest))
		if wf := runWorkflow(t, sc.custody, imsv1.WorkflowKind_WORKFLOW_KIND_UPDATE); wf.State != imsv1.WorkflowState_WORKFLOW_STATE_FAILED {
			t.Fatalf("%s: the deploy ended %v:\n%s", bad.name, wf.State, sc.cli.Run(-1, "workflow", "get", wf.Id))
		}
		refused := 0
		for _, j := range sc.jobs(t) {
			if before[j.Id] {
				continue
			}
			if j.ComponentType == "terraform" {
				t.Fatalf("%s: the module's component %s ran a %s job (%v)", bad.name, j.Component, j.Operation, j.State)
			}
			if j.State != imsv1.JobState_JOB_STATE_FAILED {
				continue
			}
			refused++
			named := false
			for name, digest := range nextArtifacts {
				named = named || strings.Contains(j.Error, "artifact "+name+"@"+digest+" (digest "+digest+")")
			}
			for _, w := range []string{rule, bad.want, "refused before the plugin ran"} {
				if !strings.Contains(j.Error, w) || !named {
					t.Fatalf("%s: the job's error %q lacks %q or the artifact", bad.name, j.Error, w)
				}
			}
		}
		if refused == 0 {
			t.Fatalf("%s: no job was refused", bad.name)
		}
		journalled := 0
		for _, r := range sc.journal(t, "supply_chain.refused") {
			var data map[string]string
			if err := json.Unmarshal([]byte(r.Data), &data); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(data["reason"], bad.want) && data["rule"] == "require-attestation slsa-provenance" &&
				data["artifact"] != "" && nextArtifacts[strings.Split(data["artifact"], "@")[0]] == data["digest"] {
				journalled++
				refusedArtifacts = append(refusedArtifacts, data["artifact"])
			}
		}
		if journalled != refused {
			t.Fatalf("%s: %d refusals journalled, %d jobs refused", bad.name, journalled, refused)
		}
	}
	// imsd's audit chain records the refusals with the rule.
	refusals := sc.imsdRefusals(t)
	for _, a := range refusedArtifacts {
		found := false
		for k, v := range refusals {
			found = found || strings.HasPrefix(k, a+" ") && strings.HasPrefix(v, "require-attestation slsa-provenance: ")
		}
		if !found {
			t.Fatalf("imsd's chain records no refusal of %s by require-attestation: %v", a, refusals)
		}
	}
	// Nothing imsd did changed the policy.
	if out := sc.policy(t); !strings.Contains(out, wantPolicy) || !strings.Contains(out, "trusted: keyless identity "+good) {
		t.Fatalf("policy after the vendor's deploys: %s", out)
	}
}
