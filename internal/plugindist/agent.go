package plugindist

// An agent release is the agent itself as an OCI artifact, packed and
// signed like a plugin release: an OCI 1.1 image manifest of artifact
// type AgentArtifactType whose config (AgentConfigMediaType) names its
// version and whose layers are its binaries (AgentBinaryMediaType), one
// per file (AgentFiles: agentd and byoc-plugins, AnnotationFile) and
// OS/architecture (AnnotationPlatform). Its signature is the same
// referrer as a plugin release's, of type AgentType: "byoc agent
// publish" signs it with imsd's job signing key and "agentd update
// apply" verifies it with the imsd keys the agent holds. The signature
// covers the manifest's digest, which covers the artifact type, so a
// plugin release never passes for an agent release or the reverse.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/Masterminds/semver/v3"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"

	"github.com/byoc-dev/byoc/internal/ocicopy"
)

// Media and artifact types of an agent release.
const (
	AgentArtifactType    = "application/vnd.byoc.agent.v1"
	AgentConfigMediaType = "application/vnd.byoc.agent.release.v1+json"
	AgentBinaryMediaType = "application/vnd.byoc.agent.binary.v1"
	// AnnotationFile is an agent binary layer's file name (AgentFiles).
	AnnotationFile = "dev.byoc.agent.file"
	// AgentType is an agent release's type: in its config, on its
	// manifest (AnnotationType) and in its signature.
	AgentType = "agent"
)

// AgentFiles are the files of an agent release, for every platform.
var AgentFiles = []string{"agentd", "byoc-plugins"}

// AgentRelease is what "byoc agent publish" packs.
type AgentRelease struct {
	// Version is a semantic version (1.4.2 or v1.4.2): the customer's
	// update policy compares it.
	Version string
	// Binaries are the files (AgentFiles) by platform (linux/amd64).
	Binaries map[string]map[string][]byte
}

// agentConfig is an agent release's config.
type agentConfig struct {
	Type    string   `json:"type"`
	Version string   `json:"version"`
	Files   []string `json:"files"`
}

// AgentKey is the key of an agent binary in Manifest.Layers: its
// platform and file, "linux/amd64/agentd".
func AgentKey(platform, file string) string { return platform + "/" + file }

// Check checks an agent release before it is packed.
func (r AgentRelease) Check() error {
	if _, err := semver.StrictNewVersion(strings.TrimPrefix(r.Version, "v")); err != nil {
		return fmt.Errorf("version %q: want a semantic version such as 1.4.2: %w", r.Version, err)
	}
	if len(r.Binaries) == 0 {
		return errors.New("no binaries")
	}
	for p, files := range r.Binaries {
		if !platform.MatchString(p) {
			return fmt.Errorf("platform %q: want OS/ARCH such as linux/amd64", p)
		}
		for _, f := range AgentFiles {
			if len(files[f]) == 0 {
				return fmt.Errorf("the %s %s binary is missing or empty", p, f)
			}
		}
		for f := range files {
			if !slices.Contains(AgentFiles, f) {
				return fmt.Errorf("%s: unknown file %q; an agent release holds %s", p, f, strings.Join(AgentFiles, " and "))
			}
		}
	}
	return nil
}

// PushAgent packs r into repo, tags it tag (when not empty) and returns
// the manifest's descriptor; sign it with Sign(ctx, repo, md, AgentType,
// r.Version, key). The same release always gives the same digest.
func PushAgent(ctx context.Context, repo *ocicopy.Repo, tag string, r AgentRelease) (ocispec.Descriptor, error) {
	if err := r.Check(); err != nil {
		return ocispec.Descriptor{}, err
	}
	cb, err := json.Marshal(agentConfig{Type: AgentType, Version: r.Version, Files: AgentFiles})
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	config := content.NewDescriptorFromBytes(AgentConfigMediaType, cb)
	if err := pushBlob(ctx, repo, config, cb); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("push the config: %w", err)
	}
	var layers []ocispec.Descriptor
	for _, p := range slices.Sorted(maps.Keys(r.Binaries)) {
		for _, f := range AgentFiles {
			b := r.Binaries[p][f]
			d := content.NewDescriptorFromBytes(AgentBinaryMediaType, b)
			d.Annotations = map[string]string{AnnotationPlatform: p, AnnotationFile: f, ocispec.AnnotationTitle: f}
			if err := pushBlob(ctx, repo, d, b); err != nil {
				return ocispec.Descriptor{}, fmt.Errorf("push the %s %s binary: %w", p, f, err)
			}
			layers = append(layers, d)
		}
	}
	md, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, AgentArtifactType, oras.PackManifestOptions{
		ConfigDescriptor: &config,
		Layers:           layers,
		ManifestAnnotations: map[string]string{ocispec.AnnotationCreated: "1970-01-01T00:00:00Z",
			AnnotationType: AgentType, AnnotationVersion: r.Version},
	})
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("pack the manifest: %w", err)
	}
	if tag != "" {
		if err := repo.Tag(ctx, md, tag); err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("tag %s: %w", tag, err)
		}
	}
	return md, nil
}

// ReadAgent reads the agent release at digest dg in repo, its manifest
// and config checked against their digests, and refuses anything that is
// not an agent release or lacks a file of AgentFiles for a platform. Its
// Layers are keyed by AgentKey; its Describe is the config. It does not
// check the signature (Verify does).
func ReadAgent(ctx context.Context, repo *ocicopy.Repo, dg digest.Digest) (*Manifest, error) {
	name := repo.Name() + "@" + dg.String()
	desc, err := repo.Resolve(ctx, dg.String())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if desc.Digest != dg {
		return nil, fmt.Errorf("%s: digest mismatch: the registry answered %s", name, desc.Digest)
	}
	if desc.Size <= 0 || desc.Size > maxManifestBytes {
		return nil, fmt.Errorf("%s: a manifest of %d bytes is not an agent release", name, desc.Size)
	}
	b, err := content.FetchAll(ctx, repo, desc)
	if err != nil {
		return nil, fmt.Errorf("%s: read the manifest: %w", name, err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: the manifest: %w", name, err)
	}
	if m.ArtifactType != AgentArtifactType || m.Config.MediaType != AgentConfigMediaType {
		return nil, fmt.Errorf("%s is not an agent release (artifact type %q, config %q; want %s, published with byoc agent publish)",
			name, m.ArtifactType, m.Config.MediaType, AgentArtifactType)
	}
	if m.Config.Size > maxDescribeBytes {
		return nil, fmt.Errorf("%s: the config is %d bytes; at most %d are allowed", name, m.Config.Size, maxDescribeBytes)
	}
	cb, err := content.FetchAll(ctx, repo, m.Config)
	if err != nil {
		return nil, fmt.Errorf("%s: read the config %s: %w", name, m.Config.Digest, err)
	}
	var c agentConfig
	if err := json.Unmarshal(cb, &c); err != nil {
		return nil, fmt.Errorf("%s: the config: %w", name, err)
	}
	if c.Type != AgentType || c.Version == "" || m.Annotations[AnnotationType] != AgentType || m.Annotations[AnnotationVersion] != c.Version {
		return nil, fmt.Errorf("%s: the manifest names %s %s but its config %s %s", name,
			m.Annotations[AnnotationType], m.Annotations[AnnotationVersion], c.Type, c.Version)
	}
	out := &Manifest{Descriptor: desc, Type: AgentType, Version: c.Version, Describe: cb, Layers: map[string]ocispec.Descriptor{}}
	platforms := map[string]int{}
	for _, l := range m.Layers {
		p, f := l.Annotations[AnnotationPlatform], l.Annotations[AnnotationFile]
		if l.MediaType != AgentBinaryMediaType || !platform.MatchString(p) || !slices.Contains(AgentFiles, f) {
			return nil, fmt.Errorf("%s: layer %s is not an agent binary with a platform and a file name", name, l.Digest)
		}
		k := AgentKey(p, f)
		if _, dup := out.Layers[k]; dup {
			return nil, fmt.Errorf("%s: two %s binaries for %s", name, f, p)
		}
		out.Layers[k] = l
		platforms[p]++
	}
	for p, n := range platforms {
		if n != len(AgentFiles) {
			return nil, fmt.Errorf("%s: the %s release lacks one of %s", name, p, strings.Join(AgentFiles, ", "))
		}
	}
	return out, nil
}
