package agent

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/internal/attest"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocisign"
	"github.com/byoc-dev/byoc/internal/ocisign/ocikeyless"
	"github.com/byoc-dev/byoc/plugins/sdk"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// Journal record kinds of the customer's supply-chain policy.
const (
	// KindSupplyChainRefused: a job refused for an unsigned artifact.
	KindSupplyChainRefused = "supply_chain.refused"
	// KindSupplyChainWarned: an unsigned artifact let through (mode warn).
	KindSupplyChainWarned = "supply_chain.warned"
	// KindSupplyChainVerified: an artifact's signature checked.
	KindSupplyChainVerified = "supply_chain.verified"
)

// BuildType is the build agent's component type (plugins/build).
const BuildType = "build"

// RuleRequireSignature names the rule in refusals.
const RuleRequireSignature = permissions.RuleRequireSignature

// supplyChain returns the customer's supply-chain policy and the keys it
// trusts: imsd's keys the agent pinned, then the policy's own.
func (a *Agent) supplyChain() (permissions.SupplyChainPolicy, []ed25519.PublicKey, error) {
	st, err := a.permissions()
	if err != nil {
		return permissions.SupplyChainPolicy{}, nil, err
	}
	p := st.SupplyChain
	var keys []ed25519.PublicKey
	if !p.NoIMSDKeys {
		a.mu.Lock()
		keys = make([]ed25519.PublicKey, 0, len(a.keys))
		for _, id := range slices.Sorted(maps.Keys(a.keys)) {
			keys = append(keys, a.keys[id])
		}
		a.mu.Unlock()
	}
	extra, err := p.PublicKeys()
	if err != nil {
		return p, nil, fmt.Errorf("supply-chain policy: %w", err)
	}
	return p, append(keys, extra...), nil
}

// artifactRef is the one artifact a component's job deploys: where it
// is read from (for the error) and its digest.
type artifactRef struct {
	field, ref string
	reg        ocicopy.Registry
	repository string
	digest     digest.Digest
	creds      ocicopy.Credentials
}

// supplyChainArtifact finds the artifact of an image, helm or terraform
// job's config: an image's source (in the vendor registry, or a full
// reference), a chart's or a module's reference (in the install
// registry, or an OCI layout). ok is false for a job that deploys none
// (another type); a chart_dir, module_dir or plain manifests, which
// carry no signature, are an error.
func (r *PluginRunner) supplyChainArtifact(job Job, config map[string]any) (artifactRef, bool, error) {
	field := map[string]string{"image": "source", "helm": "chart", "terraform": "module"}[job.ComponentType]
	if field == "" {
		return artifactRef{}, false, nil
	}
	s, _ := config[field].(string)
	if s == "" {
		// A source with no digest (a directory on the agent, plain
		// manifests) carries no signature: under the policy it is
		// refused, or the policy could be sidestepped by the config.
		for _, f := range []string{"chart_dir", "manifests", "manifests_base64", "module_dir"} {
			if v, ok := config[f]; ok && v != nil && v != "" {
				return artifactRef{field: f, ref: "config." + f}, false,
					fmt.Errorf("config.%s deploys no artifact by digest, so nothing of it can carry a signature", f)
			}
		}
		return artifactRef{}, false, nil
	}
	a := artifactRef{field: field, ref: s}
	name, dg, found := strings.Cut(s, "@")
	if !found {
		return a, false, fmt.Errorf("config.%s %q names no digest", field, s)
	}
	a.digest = digest.Digest(dg)
	if err := a.digest.Validate(); err != nil {
		return a, false, fmt.Errorf("config.%s %q: %v", field, s, err)
	}
	if ocicopy.ValidRepository(name) {
		// A repository name: the vendor registry's for an image, the
		// install registry's for a chart or module.
		a.repository = name
		if job.ComponentType == "image" {
			env := job.registryEnv
			if env[VendorRegistryEnv] == "" {
				return a, false, fmt.Errorf("config.%s %q: the job carried no vendor registry grant to read its signature with", field, s)
			}
			// Read as the image type reads it (plugins/image), so the
			// check is of what the plugin copies: a registry, or an
			// offline bundle's layout root (oci:DIR).
			reg, err := ocicopy.ParseRegistry(env[VendorRegistryEnv])
			if err != nil {
				return a, false, fmt.Errorf("vendor registry %q: %w", env[VendorRegistryEnv], err)
			}
			if v, ok := env[VendorPlainHTTPEnv]; ok {
				reg.PlainHTTP = v == "1" || v == "true"
			}
			a.reg = reg
			a.creds = ocicopy.Credentials{AccessToken: env[VendorTokenEnv]}
			return a, true, nil
		}
		if job.artifactRegistry != "" {
			reg, err := ocicopy.ParseRegistry(job.artifactRegistry)
			if err != nil {
				return a, false, fmt.Errorf("registry %q: %w", job.artifactRegistry, err)
			}
			a.reg = reg
			return a, true, nil
		}
		reg, err := ocicopy.ParseRegistry(r.InstallRegistry)
		if err != nil {
			return a, false, fmt.Errorf("install registry %q: %w", r.InstallRegistry, err)
		}
		a.reg, a.creds = reg, r.installCreds(job)
		return a, true, nil
	}
	ref, err := ocicopy.ParseReference(s)
	if err != nil {
		return a, false, fmt.Errorf("config.%s %q: %w", field, s, err)
	}
	a.reg, a.repository = ref.Registry, ref.Repository
	if job.ComponentType == "image" {
		a.creds = ocicopy.CredentialsFromEnv(r.Secrets, "BYOC_SOURCE_REGISTRY")
	} else {
		a.creds = r.installCreds(job)
	}
	return a, true, nil
}

// Verification verdicts.
const (
	VerdictVerified = "verified"
	VerdictWarned   = "warned"
	VerdictRefused  = "refused"
)

// Rule names in refusals, besides RuleRequireSignature.
const (
	RuleRequireAttestation  = permissions.RuleRequireAttestation
	RuleDenyVulnerabilities = permissions.RuleDenyVulnerabilities
)

// ArtifactVerification is what the agent verified of the artifact a job
// deploys before the job ran; it goes to imsd with the job's result.
type ArtifactVerification struct {
	Component string
	// Artifact is the reference the job's config named; Digest its
	// digest.
	Artifact, Digest string
	// KeyID is the trusted key whose signature verified, or the keyless
	// signer ("keyless:ISSUER:SUBJECT"); empty: none did.
	KeyID string
	// Attestations are the predicate types of the attestations that
	// verified (signed by a trusted key, about the digest).
	Attestations []string
	// Verdict is VerdictVerified, VerdictWarned or VerdictRefused.
	Verdict string
	// Failed are the rules not met, each "RULE: why".
	Failed []string
}

// verificationsToProto is what a job's result tells imsd of them.
func verificationsToProto(vs []ArtifactVerification) []*agentv1.ArtifactVerification {
	var out []*agentv1.ArtifactVerification
	for _, v := range vs {
		out = append(out, &agentv1.ArtifactVerification{Artifact: v.Artifact, Digest: v.Digest, KeyId: v.KeyID,
			Attestations: v.Attestations, Verdict: v.Verdict, Failed: v.Failed})
	}
	return out
}

// checkSupplyChain enforces the customer's supply-chain policy on job
// before its plugin starts: the artifact a plan or apply of an image,
// helm or terraform component deploys must carry what the policy asks: a
// signature (internal/ocisign) by a trusted key or, keylessly, by a
// trusted identity (require-signature),
// attestations signed by one (require-attestation: SLSA provenance, an
// SBOM; internal/attest), and a vulnerability scan with nothing at or
// above a severity (deny-vulnerabilities). A refusal names the artifact,
// its digest and the rule, and is journalled; in mode warn the same is
// logged and journalled and the job runs. It returns what it verified,
// for imsd.
func (r *PluginRunner) checkSupplyChain(ctx context.Context, job Job, config map[string]any, log func(int32, string)) ([]ArtifactVerification, error) {
	return r.supplyChainVerdict(ctx, job, config, log, func(kind string, data map[string]string) {
		if r.journal != nil {
			r.journal(kind, "job:"+job.ID, data)
		}
	})
}

// supplyChainVerdict is checkSupplyChain, its journal records given to
// note.
func (r *PluginRunner) supplyChainVerdict(ctx context.Context, job Job, config map[string]any, log func(int32, string), note func(kind string, data map[string]string)) ([]ArtifactVerification, error) {
	// What runs the artifact: a plan, an apply and an import (which
	// runs a module's code and adopts what it manages). A destroy (and
	// its plan) and a drift check of what is already there stay
	// possible.
	if job.SupplyChain == nil || (job.Operation != sdk.OpPlan && job.Operation != sdk.OpApply && job.Operation != sdk.OpImport) {
		return nil, nil
	}
	p, trusted, err := job.SupplyChain()
	if err != nil {
		return nil, err
	}
	if !p.Active() {
		return nil, nil
	}
	art, ok, err := r.supplyChainArtifact(job, config)
	if !ok && err == nil {
		return nil, nil
	}
	v := ArtifactVerification{Component: job.Component, Artifact: art.ref, Digest: art.digest.String()}
	var failed []string // rule names, in v.Failed's order
	if err != nil {
		rule := RuleRequireSignature
		if !p.RequireSignature {
			rule = RuleRequireAttestation
		}
		failed, v.Failed = []string{rule}, []string{rule + ": " + err.Error()}
	} else {
		failed, v.Failed = verifyAgainst(ctx, p, art, trusted, &v)
	}
	if len(failed) == 0 {
		v.Verdict = VerdictVerified
		what := "verified"
		if signer, ok := strings.CutPrefix(v.KeyID, "keyless:"); ok {
			what = "signed keylessly by " + signer
		} else if v.KeyID != "" {
			what = "signed by key " + v.KeyID
		}
		if len(v.Attestations) > 0 {
			what += "; attested: " + strings.Join(v.Attestations, ", ")
		}
		log(StreamSystem, fmt.Sprintf("[agentd] supply-chain policy: %s (%s) is %s", art.ref, art.digest, what))
		note(KindSupplyChainVerified, map[string]string{"artifact": art.ref, "digest": art.digest.String(), "key_id": v.KeyID,
			"attestations": strings.Join(v.Attestations, ","), "component": job.Component})
		return []ArtifactVerification{v}, nil
	}
	rules := strings.Join(failed, ", ")
	msg := fmt.Sprintf("supply-chain policy (rule %s): component %s artifact %s (digest %s): %s",
		rules, job.Component, art.ref, art.digest, strings.Join(v.Failed, "; "))
	if art.digest == "" {
		msg = fmt.Sprintf("supply-chain policy (rule %s): component %s: %s", rules, job.Component, strings.Join(v.Failed, "; "))
	}
	data := map[string]string{"rule": rules, "artifact": art.ref, "digest": art.digest.String(),
		"component": job.Component, "reason": strings.Join(v.Failed, "; ")}
	warnOnly := true
	for _, r := range failed {
		warnOnly = warnOnly && p.WarnsOn(r)
	}
	if warnOnly {
		v.Verdict = VerdictWarned
		why := "mode warn"
		if !p.Warn() {
			why = "warn-on " + strings.Join(p.WarnOn, ", ")
		}
		log(StreamSystem, "[agentd] warning: "+msg+"; "+why+": the job runs")
		note(KindSupplyChainWarned, data)
		return []ArtifactVerification{v}, nil
	}
	v.Verdict = VerdictRefused
	note(KindSupplyChainRefused, data)
	return []ArtifactVerification{v}, errors.New(msg + "; refused before the plugin ran")
}

// verifyAgainst checks art in its registry against each rule of p,
// filling v's key id and attestations; it returns the rules not met and
// why (v.Failed).
func verifyAgainst(ctx context.Context, p permissions.SupplyChainPolicy, art artifactRef, trusted []ed25519.PublicKey, v *ArtifactVerification) (rules, why []string) {
	fail := func(rule string, err error) {
		rules = append(rules, rule)
		why = append(why, rule+": "+err.Error())
	}
	firstRule := RuleRequireSignature
	if !p.RequireSignature {
		firstRule = RuleRequireAttestation
		if len(p.RequireAttestations) == 0 {
			firstRule = RuleDenyVulnerabilities
		}
	}
	repo, err := ocicopy.Open(ctx, art.reg, art.repository, art.creds)
	if err != nil {
		fail(firstRule, err)
		return rules, why
	}
	defer repo.Close()
	desc, err := repo.Resolve(ctx, art.digest.String())
	if err == nil && desc.Digest != art.digest {
		err = fmt.Errorf("the registry answered digest %s", desc.Digest)
	}
	if err != nil {
		fail(firstRule, err)
		return rules, why
	}
	// The signature is looked for whatever the rules, for the report:
	// by a trusted key, or keylessly by a trusted identity.
	ids, tr, trustErr := p.KeylessTrust()
	var kl ocisign.KeylessVerifier
	if tr != nil {
		kl = ocikeyless.Trust{Root: tr, Identities: ids}
	}
	keyID, sigErr := ocisign.VerifyTrusted(ctx, repo, desc, ocisign.ArtifactType, "", "the artifact", trusted, kl)
	v.KeyID = keyID
	if sigErr != nil && p.RequireSignature {
		fail(RuleRequireSignature, sigErr)
	}
	err = trustErr
	var found attest.Found
	if err == nil {
		trust := attest.Trust{Keys: trusted, Identities: ids}
		if tr != nil {
			trust.Root = tr
		}
		found, err = attest.FindTrusted(ctx, repo, desc, trust)
	}
	if err != nil {
		if len(p.RequireAttestations) > 0 {
			fail(RuleRequireAttestation, err)
		}
		if p.DenyVulnerabilities != "" {
			fail(RuleDenyVulnerabilities, err)
		}
		return rules, why
	}
	v.Attestations = found.Types()
	rejected := ""
	if len(found.Rejected) > 0 {
		rejected = " (attestations refused: " + strings.Join(found.Rejected, "; ") + ")"
	}
	for _, s := range p.RequireAttestations {
		rule, err := permissions.ParseAttestationRule(s)
		if err != nil {
			fail(RuleRequireAttestation+" "+s, err)
			continue
		}
		switch rule.Kind {
		case permissions.AttestSBOM:
			if len(found.Has(attest.SPDXPredicate, attest.CycloneDXPredicate)) == 0 {
				fail(RuleRequireAttestation+" "+s, errors.New("no SBOM attestation signed by a trusted key"+rejected))
			}
		case permissions.AttestSLSAProvenance:
			provs := found.Has(attest.SLSAProvenanceV1)
			if len(provs) == 0 {
				fail(RuleRequireAttestation+" "+s, errors.New("no SLSA provenance signed by a trusted key"+rejected))
				continue
			}
			best := 0
			for _, pv := range provs {
				best = max(best, attest.ProvenanceLevel(pv))
			}
			if best < rule.MinLevel {
				fail(RuleRequireAttestation+" "+s, fmt.Errorf("its provenance attests SLSA Build level %d", best))
			}
		}
	}
	if p.DenyVulnerabilities != "" {
		scans := found.Has(attest.VulnPredicate)
		if len(scans) == 0 {
			fail(RuleDenyVulnerabilities+" "+p.DenyVulnerabilities, errors.New("no vulnerability scan attestation signed by a trusted key"+rejected))
		}
		for _, sc := range scans {
			n, err := attest.CountAtLeast(sc.Statement.Predicate, p.DenyVulnerabilities)
			if err == nil && n > 0 {
				err = fmt.Errorf("its scan (signed by key %s) lists %d vulnerabilities of severity %s or above", sc.KeyID, n, p.DenyVulnerabilities)
			}
			if err != nil {
				fail(RuleDenyVulnerabilities+" "+p.DenyVulnerabilities, err)
				break
			}
		}
	}
	return rules, why
}

// signBuild signs the artifact a successful build job put into the
// vendor registry (its outputs repository and digest) with ArtifactKey,
// as an ocisign referrer, and keylessly with KeylessSign
// (ocikeyless.Sign), and attests it (internal/attest, referrers
// too): SLSA provenance of the sync or package, and an SBOM where the
// source carried one (an SBOM referrer of a synced artifact, or an
// SBOM file in a packaged directory). It adds the key's id (signed_by)
// and the attestations' predicate types (attestations) to the outputs.
// Without ArtifactKey and KeylessSign it does nothing.
func (r *PluginRunner) signBuild(ctx context.Context, job Job, outputs map[string]string, begun time.Time, log func(int32, string)) error {
	if (r.ArtifactKey == nil && r.KeylessSign == nil) || job.ComponentType != BuildType || job.Operation != sdk.OpApply {
		return nil
	}
	repoName, dg := outputs["repository"], digest.Digest(outputs["digest"])
	if !ocicopy.ValidRepository(repoName) || dg.Validate() != nil {
		return fmt.Errorf("sign the build: its outputs name no repository and digest (%q, %q)", repoName, dg)
	}
	env := job.registryEnv
	if env[VendorRegistryEnv] == "" {
		return errors.New("sign the build: the job carried no vendor registry grant")
	}
	repo, err := ocicopy.Open(ctx, ocicopy.Registry{Host: env[VendorRegistryEnv], PlainHTTP: env[VendorPlainHTTPEnv] == "1"},
		repoName, ocicopy.Credentials{AccessToken: env[VendorTokenEnv]})
	if err != nil {
		return fmt.Errorf("sign the build: %w", err)
	}
	defer repo.Close()
	desc, err := repo.Resolve(ctx, dg.String())
	if err != nil {
		return fmt.Errorf("sign the build %s@%s: %w", repoName, dg, err)
	}
	if desc.Digest != dg {
		return fmt.Errorf("sign the build %s@%s: the registry answered digest %s", repoName, dg, desc.Digest)
	}
	var sig ocisign.Signature
	if r.ArtifactKey != nil {
		if sig, err = ocisign.Sign(ctx, repo, desc, ocisign.ArtifactType, "", r.ArtifactKey); err != nil {
			return fmt.Errorf("sign the build %s@%s: %w", repoName, dg, err)
		}
		outputs["signed_by"] = sig.KeyID
		log(StreamSystem, fmt.Sprintf("[agentd] signed %s@%s with key %s", repoName, dg, sig.KeyID))
	}
	if r.KeylessSign != nil {
		signer, err := ocikeyless.Sign(ctx, repo, desc, r.KeylessSign.SignMessage)
		if err != nil {
			return fmt.Errorf("sign the build %s@%s keylessly: %w", repoName, dg, err)
		}
		log(StreamSystem, fmt.Sprintf("[agentd] signed %s@%s keylessly as %s", repoName, dg, signer))
	}

	statements := []attest.Statement{}
	st, err := attest.NewStatement(repoName, dg, attest.SLSAProvenanceV1, provenance(job, outputs, sig.KeyID, begun, time.Now().UTC()))
	if err != nil {
		return fmt.Errorf("attest the build %s@%s: %w", repoName, dg, err)
	}
	statements = append(statements, st)
	sbomType, sbom, from, err := buildSBOM(ctx, repo, desc, job.Config)
	if err != nil {
		return fmt.Errorf("attest the build %s@%s: its SBOM: %w", repoName, dg, err)
	}
	if sbom != nil {
		st, err := attest.NewStatement(repoName, dg, sbomType, sbom)
		if err != nil {
			return fmt.Errorf("attest the build %s@%s: %w", repoName, dg, err)
		}
		statements = append(statements, st)
		log(StreamSystem, fmt.Sprintf("[agentd] SBOM of %s@%s from %s", repoName, dg, from))
	}
	var types []string
	for _, st := range statements {
		if r.ArtifactKey != nil {
			if _, err := attest.Attach(ctx, repo, desc, st, r.ArtifactKey); err != nil {
				return fmt.Errorf("attest the build %s@%s: %w", repoName, dg, err)
			}
		}
		if r.KeylessSign != nil {
			bun, err := r.KeylessSign.Bundle(ctx, st)
			if err != nil {
				return fmt.Errorf("attest the build %s@%s keylessly: %w", repoName, dg, err)
			}
			if _, err := attest.AttachBundle(ctx, repo, desc, bun, st.PredicateType, "keyless"); err != nil {
				return fmt.Errorf("attest the build %s@%s: %w", repoName, dg, err)
			}
		}
		types = append(types, st.PredicateType)
	}
	outputs["attestations"] = strings.Join(types, ",")
	log(StreamSystem, fmt.Sprintf("[agentd] attested %s@%s: %s", repoName, dg, strings.Join(types, ", ")))
	return nil
}

// installCreds are the install registry's credentials the job's plugin
// gets: the secrets' BYOC_INSTALL_REGISTRY_*, overridden by the job's
// mode credentials' (an Azure or Google Cloud stack's identity).
func (r *PluginRunner) installCreds(job Job) ocicopy.Credentials {
	env := map[string]string{}
	for k, v := range r.Secrets {
		if strings.HasPrefix(k, InstallRegistryEnv+"_") {
			env[k] = v
		}
	}
	for k, v := range job.credEnv {
		if strings.HasPrefix(k, InstallRegistryEnv+"_") {
			env[k] = v
		}
	}
	return ocicopy.CredentialsFromEnv(env, InstallRegistryEnv)
}

// BuilderID is the SLSA builder id of byoc's build agent; its version
// names the key it signs with.
const BuilderID = "https://byoc.dev/agentd/build-agent"

// provenance is the SLSA provenance v1 of a build job: what it was asked
// to build (kind, source, repository, tag), the source's digest it
// resolved, the job's id and when it ran.
func provenance(job Job, outputs map[string]string, keyID string, started, finished time.Time) attest.Provenance {
	var p attest.Provenance
	p.BuildDefinition.BuildType = attest.BuildType
	ext := map[string]any{}
	for _, k := range []string{"kind", "source", "repository", "tag"} {
		if v, _ := job.Config[k].(string); v != "" {
			ext[k] = v
		}
	}
	p.BuildDefinition.ExternalParameters = ext
	p.BuildDefinition.InternalParameters = map[string]any{"install": job.InstallID, "component": job.Component}
	if src, sd := outputs["source"], digest.Digest(outputs["source_digest"]); sd.Validate() == nil {
		p.BuildDefinition.ResolvedDependencies = []attest.ResourceDescriptor{{URI: src, Digest: map[string]string{sd.Algorithm().String(): sd.Encoded()}}}
	}
	p.RunDetails.Builder.ID = BuilderID
	p.RunDetails.Builder.Version = map[string]string{"signing_key": keyID}
	p.RunDetails.Metadata.InvocationID = fmt.Sprintf("%s/%d", job.ID, job.Attempt)
	p.RunDetails.Metadata.StartedOn = started.Format(time.RFC3339)
	p.RunDetails.Metadata.FinishedOn = finished.Format(time.RFC3339)
	return p
}

// maxSBOMBytes bounds an SBOM the build agent attests.
const maxSBOMBytes = 8 << 20

// buildSBOM finds the SBOM a build's source carried: for a sync, an SBOM
// referrer of the artifact (copied with it); for a package, an SBOM file
// in the directory (the first by name). It returns its predicate type,
// the document and where it came from; nil for none.
func buildSBOM(ctx context.Context, repo *ocicopy.Repo, desc ocispec.Descriptor, config map[string]any) (string, json.RawMessage, string, error) {
	if s, _ := config["archive"].(string); s != "" {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return "", nil, "", err
		}
		return sbomInArchive(b)
	}
	refs, err := repo.Referrers(ctx, desc, attest.MaxAttestations)
	if err != nil {
		return "", nil, "", err
	}
	for _, r := range refs {
		t, ok := attest.SBOMPredicateOf(r.ArtifactType)
		if !ok || r.Size > 1<<20 {
			continue
		}
		b, err := content.FetchAll(ctx, repo, r)
		if err != nil {
			return "", nil, "", err
		}
		var m ocispec.Manifest
		if err := json.Unmarshal(b, &m); err != nil || len(m.Layers) == 0 || m.Layers[0].Size > maxSBOMBytes {
			continue
		}
		doc, err := content.FetchAll(ctx, repo, m.Layers[0])
		if err != nil {
			return "", nil, "", err
		}
		if !json.Valid(doc) {
			return "", nil, "", fmt.Errorf("the SBOM referrer %s is not JSON", r.Digest)
		}
		return t, doc, "its referrer " + r.Digest.String(), nil
	}
	return "", nil, "", nil
}

// sbomInArchive finds an SBOM file in a gzipped tar.
func sbomInArchive(archive []byte) (string, json.RawMessage, string, error) {
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		return "", nil, "", err
	}
	tr := tar.NewReader(zr)
	type found struct {
		name, typ string
		doc       []byte
	}
	var all []found
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", nil, "", err
		}
		t, ok := attest.SBOMPredicateOf(path.Base(h.Name))
		if !ok || h.Typeflag != tar.TypeReg {
			continue
		}
		if h.Size > maxSBOMBytes {
			return "", nil, "", fmt.Errorf("%s: %d bytes, more than %d", h.Name, h.Size, maxSBOMBytes)
		}
		b, err := io.ReadAll(io.LimitReader(tr, maxSBOMBytes))
		if err != nil {
			return "", nil, "", err
		}
		if !json.Valid(b) {
			return "", nil, "", fmt.Errorf("%s is not JSON", h.Name)
		}
		all = append(all, found{h.Name, t, b})
	}
	if len(all) == 0 {
		return "", nil, "", nil
	}
	slices.SortFunc(all, func(a, b found) int { return strings.Compare(a.name, b.name) })
	return all[0].typ, all[0].doc, "the file " + all[0].name, nil
}
