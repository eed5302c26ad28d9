package agent

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"

	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/internal/attest"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/internal/ocisign"
	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// tgz is a gzipped tar of files.
func tgz(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	}) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(files[name])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(files[name]))
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// TestSupplyChainAttestations: the build agent attests what it builds
// (SLSA provenance with the job, the source and its digest; an SBOM file
// of a packaged directory), in a real registry, and the customer's
// attestation rules are checked against them: provenance and SBOM
// present and signed by a trusted key pass; a missing SBOM, a level the
// provenance does not reach, an attestation by another key or about
// another digest, a missing vulnerability scan and a scan with a
// critical finding are refused naming the rule; mode warn runs; what was
// verified is returned for imsd.
func TestSupplyChainAttestations(t *testing.T) {
	reg, env, repo := vendorRegistry(t)
	ctx := t.Context()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	push := func(seed uint64) ocispec.Descriptor {
		d, err := ocitest.Image(ctx, repo, ocitest.ImageSpec{Seed: seed, Layers: []int64{64}})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	plain, withSBOM, other := push(1), push(2), push(3)
	r := &PluginRunner{InstallRegistry: "http://" + reg.Host, ArtifactKey: key}
	var logs []string
	log := func(_ int32, s string) { logs = append(logs, s) }
	build := func(d ocispec.Descriptor, config map[string]any) map[string]string {
		out := map[string]string{"repository": "acme/web", "digest": d.Digest.String(), "source": "src/web:1", "source_digest": digest.FromString("src").String()}
		started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		if err := r.signBuild(ctx, Job{ID: "job-7", Attempt: 2, ComponentType: BuildType, Operation: sdk.OpApply, registryEnv: env, Config: config}, out, started, log); err != nil {
			t.Fatal(err)
		}
		return out
	}
	out := build(plain, map[string]any{"kind": "sync", "source": "src/web:1", "repository": "acme/web"})
	if out["attestations"] != attest.SLSAProvenanceV1 {
		t.Fatalf("attestations %q", out["attestations"])
	}
	sbom := `{"spdxVersion":"SPDX-2.3","name":"web"}`
	archive := tgz(t, map[string]string{"main.tf": "", "sbom/web.spdx.json": sbom})
	out = build(withSBOM, map[string]any{"kind": "terraform", "source": "web", "archive": base64.StdEncoding.EncodeToString(archive)})
	if out["attestations"] != attest.SLSAProvenanceV1+","+attest.SPDXPredicate {
		t.Fatalf("attestations %q", out["attestations"])
	}
	// A synced image whose source carried an SBOM referrer (copied with
	// it): the SBOM is attested.
	synced := push(4)
	cdx := `{"bomFormat":"CycloneDX","specVersion":"1.5"}`
	layer := content.NewDescriptorFromBytes("application/vnd.cyclonedx+json", []byte(cdx))
	if err := repo.Push(ctx, layer, strings.NewReader(cdx)); err != nil {
		t.Fatal(err)
	}
	if _, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, "application/vnd.cyclonedx+json", oras.PackManifestOptions{
		Subject: &synced, Layers: []ocispec.Descriptor{layer}}); err != nil {
		t.Fatal(err)
	}
	out = build(synced, map[string]any{"kind": "sync", "source": "src/web:2", "repository": "acme/web"})
	if out["attestations"] != attest.SLSAProvenanceV1+","+attest.CycloneDXPredicate {
		t.Fatalf("synced with an SBOM referrer: attestations %q", out["attestations"])
	}
	// The provenance says what was built, from what, by which job.
	found, err := attest.Find(ctx, repo, withSBOM, []ed25519.PublicKey{pub})
	if err != nil || len(found.Verified) != 2 || len(found.Rejected) != 0 {
		t.Fatalf("find: %+v %v", found, err)
	}
	prov := found.Has(attest.SLSAProvenanceV1)[0].Statement
	var p attest.Provenance
	if err := json.Unmarshal(prov.Predicate, &p); err != nil {
		t.Fatal(err)
	}
	if p.RunDetails.Builder.ID != BuilderID || p.RunDetails.Metadata.InvocationID != "job-7/2" || p.RunDetails.Metadata.StartedOn != "2026-01-02T03:04:05Z" ||
		p.BuildDefinition.ExternalParameters["source"] != "web" || p.BuildDefinition.ResolvedDependencies[0].Digest["sha256"] != digest.FromString("src").Encoded() ||
		p.RunDetails.Builder.Version["signing_key"] != agentproto.KeyID(pub) || prov.Subject[0].Digest["sha256"] != withSBOM.Digest.Encoded() {
		t.Fatalf("provenance %s", prov.Predicate)
	}
	if got := found.Has(attest.SPDXPredicate)[0].Statement.Predicate; string(got) != sbom {
		t.Fatalf("SBOM %s", got)
	}

	// Attestations the build agent did not make: by another key; one of
	// plain's, moved onto other; vulnerability scans.
	st, _ := attest.NewStatement("acme/web", other.Digest, attest.SPDXPredicate, json.RawMessage(sbom))
	if _, err := attest.Attach(ctx, repo, other, st, otherKey); err != nil {
		t.Fatal(err)
	}
	st, _ = attest.NewStatement("acme/web", plain.Digest, attest.SLSAProvenanceV1, json.RawMessage(`{}`))
	if _, err := attest.Attach(ctx, repo, other, st, key); err != nil {
		t.Fatal(err)
	}
	scan := func(d ocispec.Descriptor, sev string) {
		st, _ := attest.NewStatement("acme/web", d.Digest, attest.VulnPredicate, json.RawMessage(
			`{"scanner":{"uri":"pkg:github/aquasecurity/trivy","result":{"Results":[{"Vulnerabilities":[{"VulnerabilityID":"CVE-1","Severity":"`+sev+`"}]}]}}}`))
		if _, err := attest.Attach(ctx, repo, d, st, key); err != nil {
			t.Fatal(err)
		}
	}
	scan(plain, "CRITICAL")
	scan(withSBOM, "LOW")
	// A provenance signed by the trusted key, then changed (its builder
	// swapped) in the registry: a tampered bundle.
	tampered := push(5)
	{
		st, _ := attest.NewStatement("acme/web", tampered.Digest, attest.SLSAProvenanceV1, json.RawMessage(`{"builder":"agentd"}`))
		bun, err := attest.Bundle(ctx, st, key)
		if err != nil {
			t.Fatal(err)
		}
		env := bun.GetDsseEnvelope()
		env.Payload = bytes.Replace(env.Payload, []byte(`"agentd"`), []byte(`"rogue"`), 1)
		b, err := bun.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		layer := content.NewDescriptorFromBytes(attest.BundleMediaType, b)
		if err := repo.Push(ctx, layer, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		if _, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, attest.BundleMediaType, oras.PackManifestOptions{
			Subject: &tampered, Layers: []ocispec.Descriptor{layer}}); err != nil {
			t.Fatal(err)
		}
	}

	var policy permissions.SupplyChainPolicy
	check := func(d ocispec.Descriptor) ([]ArtifactVerification, error) {
		j := Job{ID: "j1", Component: "net", ComponentType: "terraform", Operation: sdk.OpPlan, registryEnv: env,
			SupplyChain: func() (permissions.SupplyChainPolicy, []ed25519.PublicKey, error) {
				return policy, []ed25519.PublicKey{pub}, nil
			}}
		return r.checkSupplyChain(ctx, j, map[string]any{"module": "acme/web@" + d.Digest.String()}, log)
	}
	for _, c := range []struct {
		name   string
		policy permissions.SupplyChainPolicy
		d      ocispec.Descriptor
		want   []string // empty: verified
	}{
		{"provenance", permissions.SupplyChainPolicy{RequireSignature: true, RequireAttestations: []string{"slsa-provenance:level>=2"}}, plain, nil},
		{"provenance and sbom", permissions.SupplyChainPolicy{RequireAttestations: []string{"slsa-provenance", "sbom"}}, withSBOM, nil},
		{"no sbom", permissions.SupplyChainPolicy{RequireAttestations: []string{"slsa-provenance", "sbom"}}, plain,
			[]string{"rule require-attestation sbom", "no SBOM attestation signed by a trusted key"}},
		{"level 3", permissions.SupplyChainPolicy{RequireAttestations: []string{"slsa-provenance:level>=3"}}, plain,
			[]string{"rule require-attestation slsa-provenance:level>=3", "SLSA Build level 2"}},
		{"foreign and moved", permissions.SupplyChainPolicy{RequireAttestations: []string{"sbom", "slsa-provenance"}}, other,
			[]string{"rule require-attestation sbom, require-attestation slsa-provenance", "not signed by a trusted key", "its subject is not the artifact " + other.Digest.String()}},
		{"unsigned", permissions.SupplyChainPolicy{RequireSignature: true}, other, []string{"rule require-signature", "it has no signature"}},
		{"tampered", permissions.SupplyChainPolicy{RequireAttestations: []string{"slsa-provenance"}}, tampered,
			[]string{"rule require-attestation slsa-provenance", "no SLSA provenance signed by a trusted key", "does not verify under key " + agentproto.KeyID(pub)}},
		{"critical", permissions.SupplyChainPolicy{DenyVulnerabilities: "critical"}, plain,
			[]string{"rule deny-vulnerabilities critical", "lists 1 vulnerabilities of severity critical or above"}},
		{"low only", permissions.SupplyChainPolicy{DenyVulnerabilities: "critical"}, withSBOM, nil},
		{"low denied", permissions.SupplyChainPolicy{DenyVulnerabilities: "low"}, withSBOM, []string{"rule deny-vulnerabilities low"}},
		{"no scan", permissions.SupplyChainPolicy{DenyVulnerabilities: "high"}, other,
			[]string{"rule deny-vulnerabilities high", "no vulnerability scan attestation signed by a trusted key"}},
	} {
		policy = c.policy
		vs, err := check(c.d)
		if len(vs) != 1 || vs[0].Digest != c.d.Digest.String() || vs[0].Artifact != "acme/web@"+c.d.Digest.String() {
			t.Fatalf("%s: verifications %+v", c.name, vs)
		}
		if len(c.want) == 0 {
			if err != nil || vs[0].Verdict != VerdictVerified || vs[0].KeyID != agentproto.KeyID(pub) || !slices.Contains(vs[0].Attestations, attest.SLSAProvenanceV1) {
				t.Fatalf("%s: %v %+v", c.name, err, vs[0])
			}
			continue
		}
		if err == nil || vs[0].Verdict != VerdictRefused {
			t.Fatalf("%s passed: %+v", c.name, vs[0])
		}
		for _, w := range append(c.want, "acme/web@"+c.d.Digest.String(), "refused before the plugin ran") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", c.name, err, w)
			}
		}
	}
	policy = permissions.SupplyChainPolicy{RequireAttestations: []string{"sbom"}, Mode: permissions.SupplyChainWarn}
	if vs, err := check(plain); err != nil || vs[0].Verdict != VerdictWarned || len(vs[0].Failed) != 1 {
		t.Fatalf("warn: %v %+v", err, vs)
	}
	// One rule warned about in mode refuse: the others still refuse.
	policy = permissions.SupplyChainPolicy{RequireSignature: true, RequireAttestations: []string{"sbom"}, WarnOn: []string{"require-attestation sbom"}}
	if vs, err := check(plain); err != nil || vs[0].Verdict != VerdictWarned || !strings.Contains(strings.Join(logs, "\n"), "warn-on require-attestation sbom: the job runs") {
		t.Fatalf("warn-on: %v %+v", err, vs)
	}
	if vs, err := check(other); err == nil || vs[0].Verdict != VerdictRefused || !strings.Contains(err.Error(), "rule require-signature, require-attestation sbom") {
		t.Fatalf("warn-on, unsigned: %v %+v", err, vs)
	}
	// The signature and attestations of plain are what ocisign and
	// attest find: the key id matches the signature's.
	if id, err := ocisign.Verify(ctx, repo, plain, ocisign.ArtifactType, "", "plain", []ed25519.PublicKey{pub}); err != nil || id != agentproto.KeyID(pub) {
		t.Fatal(id, err)
	}
}
