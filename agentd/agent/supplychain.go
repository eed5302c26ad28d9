package agent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/opencontainers/go-digest"

	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocisign"
	"github.com/byoc-dev/byoc/plugins/sdk"
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
const RuleRequireSignature = "require-signature"

// supplyChain returns the customer's supply-chain policy and the keys it
// trusts: imsd's keys the agent pinned, then the policy's own.
func (a *Agent) supplyChain() (permissions.SupplyChainPolicy, []ed25519.PublicKey, error) {
	st, err := a.permissions()
	if err != nil {
		return permissions.SupplyChainPolicy{}, nil, err
	}
	p := st.SupplyChain
	a.mu.Lock()
	keys := make([]ed25519.PublicKey, 0, len(a.keys))
	for _, id := range slices.Sorted(maps.Keys(a.keys)) {
		keys = append(keys, a.keys[id])
	}
	a.mu.Unlock()
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
			a.reg = ocicopy.Registry{Host: env[VendorRegistryEnv], PlainHTTP: env[VendorPlainHTTPEnv] == "1"}
			a.creds = ocicopy.Credentials{AccessToken: env[VendorTokenEnv]}
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

// checkSupplyChain enforces the customer's supply-chain policy on job
// before its plugin starts: under require-signature, the artifact a plan
// or apply of an image, helm or terraform component deploys must carry a
// signature (internal/ocisign) by a trusted key. A refusal names the
// artifact, its digest and the rule, and is journalled; in mode warn the
// same is logged and journalled and the job runs.
func (r *PluginRunner) checkSupplyChain(ctx context.Context, job Job, config map[string]any, log func(int32, string)) error {
	// Only what deploys: a destroy (and its plan), a drift check and an
	// import of what is already there stay possible.
	if job.SupplyChain == nil || (job.Operation != sdk.OpPlan && job.Operation != sdk.OpApply) {
		return nil
	}
	p, trusted, err := job.SupplyChain()
	if err != nil {
		return err
	}
	if !p.RequireSignature {
		return nil
	}
	art, ok, err := r.supplyChainArtifact(job, config)
	if !ok && err == nil {
		return nil
	}
	note := func(kind string, data map[string]string) {
		if r.journal != nil {
			r.journal(kind, "job:"+job.ID, data)
		}
	}
	if err == nil {
		var keyID string
		keyID, err = verifyArtifact(ctx, art, trusted)
		if err == nil {
			log(StreamSystem, fmt.Sprintf("[agentd] supply-chain policy: %s (%s) is signed by key %s", art.ref, art.digest, keyID))
			note(KindSupplyChainVerified, map[string]string{"artifact": art.ref, "digest": art.digest.String(), "key_id": keyID, "component": job.Component})
			return nil
		}
	}
	msg := fmt.Sprintf("supply-chain policy (rule %s): component %s artifact %s (digest %s): %v",
		RuleRequireSignature, job.Component, art.ref, art.digest, err)
	if art.digest == "" {
		msg = fmt.Sprintf("supply-chain policy (rule %s): component %s: %v", RuleRequireSignature, job.Component, err)
	}
	data := map[string]string{"rule": RuleRequireSignature, "artifact": art.ref, "digest": art.digest.String(),
		"component": job.Component, "reason": err.Error()}
	if p.Warn() {
		log(StreamSystem, "[agentd] warning: "+msg+"; mode warn: the job runs")
		note(KindSupplyChainWarned, data)
		return nil
	}
	note(KindSupplyChainRefused, data)
	return errors.New(msg + "; refused before the plugin ran")
}

// verifyArtifact checks art's signature in its registry.
func verifyArtifact(ctx context.Context, art artifactRef, trusted []ed25519.PublicKey) (string, error) {
	repo, err := ocicopy.Open(ctx, art.reg, art.repository, art.creds)
	if err != nil {
		return "", err
	}
	defer repo.Close()
	desc, err := repo.Resolve(ctx, art.digest.String())
	if err != nil {
		return "", err
	}
	if desc.Digest != art.digest {
		return "", fmt.Errorf("the registry answered digest %s", desc.Digest)
	}
	return ocisign.Verify(ctx, repo, desc, ocisign.ArtifactType, "", "the artifact", trusted)
}

// signBuild signs the artifact a successful build job put into the
// vendor registry (its outputs repository and digest) with ArtifactKey,
// as an ocisign referrer, and adds the key's id to the outputs
// (signed_by). Without ArtifactKey it does nothing.
func (r *PluginRunner) signBuild(ctx context.Context, job Job, outputs map[string]string, log func(int32, string)) error {
	if r.ArtifactKey == nil || job.ComponentType != BuildType || job.Operation != sdk.OpApply {
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
	sig, err := ocisign.Sign(ctx, repo, desc, ocisign.ArtifactType, "", r.ArtifactKey)
	if err != nil {
		return fmt.Errorf("sign the build %s@%s: %w", repoName, dg, err)
	}
	outputs["signed_by"] = sig.KeyID
	log(StreamSystem, fmt.Sprintf("[agentd] signed %s@%s with key %s", repoName, dg, sig.KeyID))
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
