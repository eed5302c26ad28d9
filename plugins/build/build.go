// Package build is the built-in "build" component type, which only the
// vendor's build agent (agentd --role build) serves: it syncs an image or
// OCI artifact (by tag or digest, multi-arch indexes and their referrers
// whole) from a registry or an OCI image layout into the vendor registry
// (internal/ocicopy: digests verified, present blobs skipped), or packages a Helm chart or Terraform
// module directory (a gzipped tar) as an OCI artifact there. Its outputs
// are the build's lineage record, which imsd stores.
//
// The vendor registry's address and a push token for exactly the build's
// repository come in the operation's environment (VendorRegistryEnv,
// VendorTokenEnv), from the grant the agent exchanged for this job.
package build

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/memory"

	"github.com/byoc-dev/byoc/internal/chartpack"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/terraform/tfmodule"
)

// TypeName is the component type.
const TypeName = "build"

// Version is the plugin's version.
const Version = "0.1.0"

// The operation environment the agent sets for registry jobs (the
// custody contract: /work/wt/contracts/custody.md, docs/operator/artifact-custody.md).
const (
	// VendorRegistryEnv is the vendor registry, host:port.
	VendorRegistryEnv = "BYOC_VENDOR_REGISTRY"
	// VendorPlainHTTPEnv is "1" when it speaks plain HTTP.
	VendorPlainHTTPEnv = "BYOC_VENDOR_REGISTRY_PLAIN_HTTP"
	// VendorTokenEnv is the registry token the grant was exchanged for.
	VendorTokenEnv = "BYOC_VENDOR_REGISTRY_TOKEN"
	// SourceCredentialsPrefix names the source registry's credentials in
	// the operation's environment: _USERNAME, _PASSWORD, _TOKEN (secrets
	// of the build agent's --secrets-file, listed in no config: the agent
	// gives every build job those of its secrets with this prefix).
	SourceCredentialsPrefix = "BYOC_SOURCE_REGISTRY"
)

// Media types of packaged directories. A Helm chart is packed as `helm
// push` lays it out (internal/chartpack), which the helm type reads; a
// Terraform module as the terraform type reads it (an OCI 1.1 artifact:
// an empty config, one gzipped tar layer).
const (
	HelmConfigType        = chartpack.ConfigMediaType
	HelmLayerType         = chartpack.LayerMediaType
	TerraformArtifactType = tfmodule.ArtifactType
	TerraformLayerType    = tfmodule.LayerMediaType
)

const configSchema = `{
  "type": "object",
  "required": ["kind", "repository", "source"],
  "additionalProperties": false,
  "properties": {
    "kind": {"type": "string", "enum": ["sync", "helm", "terraform"]},
    "repository": {"type": "string", "minLength": 1},
    "source": {"type": "string", "minLength": 1},
    "tag": {"type": "string"},
    "archive": {"type": "string"}
  }
}`

// Plugin implements sdk.Plugin.
type Plugin struct{}

// New returns the build plugin.
func New() *Plugin { return &Plugin{} }

var _ sdk.Plugin = (*Plugin)(nil)

// Describe reports the type and its config schema.
func (p *Plugin) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: TypeName, Version: Version, ConfigSchema: configSchema}, nil
}

type config struct {
	kind, repository, source, tag string
	archive                       []byte
}

func parse(c map[string]any) (config, []sdk.Diagnostic) {
	s := func(k string) string { v, _ := c[k].(string); return v }
	cfg := config{kind: s("kind"), repository: s("repository"), source: s("source"), tag: s("tag")}
	var diags []sdk.Diagnostic
	if cfg.kind == "sync" {
		if _, err := ocicopy.ParseReference(cfg.source); err != nil {
			diags = append(diags, sdk.Diagnostic{Field: "source", Message: fmt.Sprintf("%q is not a reference (HOST/REPO:TAG, HOST/REPO@DIGEST or oci:DIR:TAG): %v", cfg.source, err)})
		}
	} else {
		b, err := base64.StdEncoding.DecodeString(s("archive"))
		if err != nil || len(b) == 0 {
			diags = append(diags, sdk.Diagnostic{Field: "archive", Message: "must be the directory as a base64 gzipped tar"})
		}
		cfg.archive = b
	}
	if !ocicopy.ValidRepository(cfg.repository) {
		diags = append(diags, sdk.Diagnostic{Field: "repository", Message: fmt.Sprintf("%q is not a repository name", cfg.repository)})
	}
	return cfg, diags
}

// Validate checks the references.
func (p *Plugin) Validate(_ context.Context, req *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	_, d := parse(req.Config)
	return &sdk.ValidateResponse{Diagnostics: d}, nil
}

// Plan says what Apply would write.
func (p *Plugin) Plan(_ context.Context, req *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	cfg, _ := parse(req.Config)
	what := fmt.Sprintf("would sync %s into the vendor registry as %s", cfg.source, cfg.repository)
	if cfg.kind != "sync" {
		what = fmt.Sprintf("would package %s (%d bytes) as a %s artifact in %s", cfg.source, len(cfg.archive), cfg.kind, cfg.repository)
	}
	req.Log.System(what)
	return &sdk.PlanResponse{Changes: what}, nil
}

// Apply syncs or packages, and reports the build.
func (p *Plugin) Apply(ctx context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	cfg, diags := parse(req.Config)
	if len(diags) > 0 {
		return nil, fmt.Errorf("config.%s: %s", diags[0].Field, diags[0].Message)
	}
	dst, err := vendorRepo(ctx, req.Env, cfg.repository)
	if err != nil {
		return nil, err
	}
	defer dst.Close()
	var root ocispec.Descriptor
	var srcDigest string
	if cfg.kind == "sync" {
		root, err = p.sync(ctx, req, cfg, dst)
		srcDigest = root.Digest.String()
	} else {
		root, err = p.pack(ctx, req, cfg, dst)
		srcDigest = digest.FromBytes(cfg.archive).String()
	}
	if err != nil {
		return nil, err
	}
	req.Log.System(fmt.Sprintf("build %s@%s (%s, %d bytes)", cfg.repository, root.Digest, root.MediaType, root.Size))
	return &sdk.ApplyResponse{Outputs: map[string]string{
		"repository": cfg.repository, "digest": root.Digest.String(), "size": strconv.FormatInt(root.Size, 10),
		"media_type": root.MediaType, "kind": cfg.kind, "source": cfg.source, "source_digest": srcDigest,
		"built_at": time.Now().UTC().Format(time.RFC3339Nano),
	}}, nil
}

// vendorRepo opens repository name in the vendor registry with the job's
// token.
func vendorRepo(ctx context.Context, env map[string]string, name string) (*ocicopy.Repo, error) {
	host, tok := env[VendorRegistryEnv], env[VendorTokenEnv]
	if host == "" || tok == "" {
		return nil, fmt.Errorf("no vendor registry access: %s and %s are unset (the job carried no registry grant; is imsd started with --registry-url?)", VendorRegistryEnv, VendorTokenEnv)
	}
	r, err := ocicopy.Open(ctx, ocicopy.Registry{Host: host, PlainHTTP: env[VendorPlainHTTPEnv] == "1"}, name, ocicopy.Credentials{AccessToken: tok})
	if err != nil {
		return nil, fmt.Errorf("vendor repository %s: %w", name, err)
	}
	return r, nil
}

func (p *Plugin) sync(ctx context.Context, req *sdk.ApplyRequest, cfg config, dst *ocicopy.Repo) (ocispec.Descriptor, error) {
	ref, err := ocicopy.ParseReference(cfg.source)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if err := checkLayoutSource(cfg.source, ref); err != nil {
		return ocispec.Descriptor{}, err
	}
	src, err := ocicopy.Open(ctx, ref.Registry, ref.Repository, ocicopy.CredentialsFromEnv(req.Env, SourceCredentialsPrefix))
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("source %s: %w", cfg.source, err)
	}
	defer src.Close()
	// A tag is resolved here, once: the build records the digest it
	// named at this moment, and everything after goes by that digest.
	root := ref.Digest
	if root == "" {
		d, err := src.Resolve(ctx, ref.Tag)
		if err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("resolve source %s: %w", cfg.source, err)
		}
		root = d.Digest
	}
	req.Log.System(fmt.Sprintf("source %s is %s", cfg.source, root))
	// The whole graph: an index with every platform's manifest, and the
	// artifacts that refer to it (signatures, SBOMs); blobs the vendor
	// registry has are skipped.
	res, err := ocicopy.Copy(ctx, src, dst, root, ocicopy.Options{})
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("copy %s to the vendor registry: %w", cfg.source, err)
	}
	if cfg.tag != "" {
		if err := dst.Tag(ctx, res.Root, cfg.tag); err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("tag %s: %w", cfg.tag, err)
		}
	}
	req.Log.System(fmt.Sprintf("copied %d blobs (%d bytes) and %d manifests; %d blobs and %d manifests already present",
		res.BlobsCopied, res.BlobBytes, res.ManifestsCopied, res.BlobsSkipped, res.ManifestsSkipped))
	return res.Root, nil
}

func (p *Plugin) pack(ctx context.Context, req *sdk.ApplyRequest, cfg config, dst *ocicopy.Repo) (ocispec.Descriptor, error) {
	if cfg.kind == "helm" {
		// The same files pack to the same digest as `agentd module push
		// --kind helm` and the digests `byoc app init` writes.
		c, err := chartpack.PackArchive(cfg.archive)
		if err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("package %s: %w", cfg.source, err)
		}
		root, err := c.PushTo(ctx, dst, cfg.tag)
		if err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("push %s to the vendor registry: %w", cfg.source, err)
		}
		return root, nil
	}
	// What an install agent would refuse to unpack is refused here.
	if err := tfmodule.CheckLayer(cfg.archive); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("package %s: %w", cfg.source, err)
	}
	artifact, layerType := TerraformArtifactType, TerraformLayerType
	mem := memory.New()
	layer := ocispec.Descriptor{MediaType: layerType, Digest: digest.FromBytes(cfg.archive), Size: int64(len(cfg.archive)),
		Annotations: map[string]string{ocispec.AnnotationTitle: cfg.source + ".tar.gz"}}
	if err := mem.Push(ctx, layer, bytes.NewReader(cfg.archive)); err != nil {
		return ocispec.Descriptor{}, err
	}
	// No creation-time annotation: the same directory packs to the same
	// digest.
	root, err := oras.PackManifest(ctx, mem, oras.PackManifestVersion1_1, artifact, oras.PackManifestOptions{
		Layers: []ocispec.Descriptor{layer}, ManifestAnnotations: map[string]string{ocispec.AnnotationCreated: "1970-01-01T00:00:00Z"}})
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("pack %s: %w", cfg.source, err)
	}
	tag := cfg.tag
	if tag == "" {
		tag = root.Digest.String()
	}
	if err := mem.Tag(ctx, root, root.Digest.String()); err != nil {
		return ocispec.Descriptor{}, err
	}
	if _, err := oras.Copy(ctx, mem, root.Digest.String(), dst, tag, oras.DefaultCopyOptions); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("push %s to the vendor registry: %w", cfg.source, err)
	}
	return root, nil
}

// checkLayoutSource refuses a source in an OCI layout the plugin cannot
// see, before opening it would make an empty one and report only that
// the tag was not found. The plugin runs in the agent's sandbox, which
// shows no host path the customer (here: the vendor, on its build
// agent) did not name.
func checkLayoutSource(source string, ref ocicopy.Reference) error {
	if !ref.Registry.IsLayout() {
		return nil
	}
	dir := filepath.Join(ref.Registry.LayoutRoot, filepath.FromSlash(ref.Repository))
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil {
		return fmt.Errorf("source %s: no OCI layout at %s (%v): it does not exist, or it is not visible in the plugin's sandbox: start the build agent with --sandbox-read-only %s",
			source, dir, errors.Unwrap(err), ref.Registry.LayoutRoot)
	}
	return nil
}
