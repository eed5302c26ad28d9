package helm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/registry"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"

	"github.com/byoc-dev/byoc/internal/chartpack"
	"github.com/byoc-dev/byoc/internal/ocicopy"
)

// chartRef is a chart's OCI reference: an OCI image layout directory and
// the digest of the chart's manifest. A tag is never resolved: what runs
// is what the digest names.
type chartRef struct {
	// Layout is the layout directory (oci:DIR@...); empty for a
	// repository of the install registry.
	Layout string
	// Repository is the repository in the install registry
	// (REPO@sha256:...); empty for an explicit layout.
	Repository string
	Digest     digest.Digest
}

// parseChartRef parses oci:DIR@sha256:HEX (an OCI image layout) or
// REPO@sha256:HEX (a repository of the install registry).
func parseChartRef(s string) (chartRef, error) {
	rest, layout := strings.CutPrefix(s, "oci:")
	i := strings.LastIndex(rest, "@")
	if i < 0 {
		return chartRef{}, fmt.Errorf("%q names no digest (a tag could move under the install); reference the chart by digest, REPO@sha256:HEX in the install registry or oci:LAYOUT-DIR@sha256:HEX (helm push prints the digest it pushed, as Digest: sha256:HEX), or use chart_dir, a directory on the agent, for development", s)
	}
	name, dg := rest[:i], digest.Digest(rest[i+1:])
	if name == "" {
		return chartRef{}, fmt.Errorf("%q names no repository or layout directory", s)
	}
	if err := dg.Validate(); err != nil {
		return chartRef{}, fmt.Errorf("%q: digest %q: %v", s, dg, err)
	}
	if layout {
		return chartRef{Layout: name, Digest: dg}, nil
	}
	if strings.HasPrefix(name, "/") || strings.Contains(name, "://") || strings.Contains(name, "..") {
		return chartRef{}, fmt.Errorf("%q: a repository of the install registry is a relative name such as charts/web; an OCI layout directory is written oci:DIR@sha256:HEX", s)
	}
	return chartRef{Repository: name, Digest: dg}, nil
}

// openChart opens where ref's chart is: its OCI image layout, or its
// repository in the install registry (env BYOC_INSTALL_REGISTRY, any
// location internal/ocicopy reads, as the image type does: an OCI layout
// root oci:DIR or a registry; credentials from
// BYOC_INSTALL_REGISTRY_USERNAME, _PASSWORD or _TOKEN in the operation's
// environment). It returns the target and a name for messages.
func openChart(ctx context.Context, ref chartRef, env map[string]string) (oras.ReadOnlyTarget, string, error) {
	if ref.Layout != "" {
		store, err := oci.NewFromFS(ctx, os.DirFS(ref.Layout))
		if err != nil {
			return nil, ref.Layout, fmt.Errorf("chart %s: open OCI layout: %w", ref.Layout, err)
		}
		return store, ref.Layout, nil
	}
	loc := env[installRegistryEnv]
	if loc == "" {
		return nil, ref.Repository, fmt.Errorf("chart %s@%s names a repository of the install registry, and the agent names none (%s)", ref.Repository, ref.Digest, installRegistryEnv)
	}
	name := strings.TrimSuffix(loc, "/") + "/" + ref.Repository
	reg, err := ocicopy.ParseRegistry(loc)
	if err != nil {
		return nil, name, fmt.Errorf("install registry %s: %w", loc, err)
	}
	repo, err := ocicopy.Open(ctx, reg, ref.Repository, ocicopy.CredentialsFromEnv(env, installRegistryEnv))
	if err != nil {
		return nil, name, fmt.Errorf("chart %s: %w", name, err)
	}
	return repo, name, nil
}

// installRegistryEnv names the install registry in a job's environment
// (agentd --install-registry).
const installRegistryEnv = "BYOC_INSTALL_REGISTRY"

// maxChartBytes bounds what is read of a chart's manifest and layer.
const maxChartBytes = 64 << 20

// loadOCIChart reads the chart artifact ref names: its manifest (by
// digest), then its one chart layer, both verified against their digests
// while read.
func loadOCIChart(ctx context.Context, ref chartRef, env map[string]string) (*chart.Chart, error) {
	store, where, err := openChart(ctx, ref, env)
	if err != nil {
		return nil, err
	}
	ref.Layout = where
	desc, err := store.Resolve(ctx, ref.Digest.String())
	if err != nil {
		return nil, fmt.Errorf("chart %s@%s: %w", ref.Layout, ref.Digest, err)
	}
	if desc.Size > maxChartBytes {
		return nil, fmt.Errorf("chart %s@%s: manifest of %d bytes is too large", ref.Layout, ref.Digest, desc.Size)
	}
	raw, err := content.FetchAll(ctx, store, desc)
	if err != nil {
		return nil, fmt.Errorf("chart %s@%s: read manifest: %w", ref.Layout, ref.Digest, err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("chart %s@%s: manifest: %w", ref.Layout, ref.Digest, err)
	}
	if m.Config.MediaType != registry.ConfigMediaType {
		return nil, fmt.Errorf("chart %s@%s: not a Helm chart: config media type %q, want %q", ref.Layout, ref.Digest, m.Config.MediaType, registry.ConfigMediaType)
	}
	var layer *ocispec.Descriptor
	for i, l := range m.Layers {
		if l.MediaType == registry.ChartLayerMediaType || l.MediaType == registry.LegacyChartLayerMediaType {
			if layer != nil {
				return nil, fmt.Errorf("chart %s@%s: more than one chart layer", ref.Layout, ref.Digest)
			}
			layer = &m.Layers[i]
		}
	}
	if layer == nil {
		return nil, fmt.Errorf("chart %s@%s: no layer of media type %s", ref.Layout, ref.Digest, registry.ChartLayerMediaType)
	}
	if layer.Size > maxChartBytes {
		return nil, fmt.Errorf("chart %s@%s: chart layer of %d bytes is too large", ref.Layout, ref.Digest, layer.Size)
	}
	tgz, err := content.FetchAll(ctx, store, *layer)
	if err != nil {
		return nil, fmt.Errorf("chart %s@%s: read chart layer: %w", ref.Layout, ref.Digest, err)
	}
	// Helm bounds the bytes it unpacks, not the number of files.
	if err := chartpack.CheckArchive(tgz); err != nil {
		return nil, fmt.Errorf("chart %s@%s: %w", ref.Layout, ref.Digest, err)
	}
	ch, err := loader.LoadArchive(bytes.NewReader(tgz))
	if err != nil {
		return nil, fmt.Errorf("chart %s@%s: %w", ref.Layout, ref.Digest, err)
	}
	return ch, nil
}

// manifestsChartName is the name of the chart that wraps raw manifests.
const manifestsChartName = "byoc-manifests"

// manifestsChart wraps raw manifests in a chart. Each manifest is a file
// of the chart included verbatim by its template ({{ .Files.Get }}), so
// that text meant for another engine (Kyverno's {{ request.object }})
// is never read as a Helm template.
func manifestsChart(manifests []string) *chart.Chart {
	ch := &chart.Chart{Metadata: &chart.Metadata{
		APIVersion: chart.APIVersionV2, Name: manifestsChartName, Version: "0.0.0",
		Description: "raw manifests installed by byoc",
	}}
	for i, m := range manifests {
		name := fmt.Sprintf("manifests/%03d.yaml", i)
		ch.Files = append(ch.Files, &chart.File{Name: name, Data: []byte(m)})
		ch.Templates = append(ch.Templates, &chart.File{
			Name: fmt.Sprintf("templates/%03d.yaml", i),
			Data: []byte(fmt.Sprintf("{{ .Files.Get %q }}\n", name)),
		})
	}
	return ch
}

// loadChart loads the chart the config names.
func loadChart(ctx context.Context, c *config, env map[string]string) (*chart.Chart, error) {
	switch {
	case c.Chart != "":
		ref, err := parseChartRef(c.Chart)
		if err != nil {
			return nil, fmt.Errorf("config.chart: %w", err)
		}
		return loadOCIChart(ctx, ref, env)
	case c.ChartDir != "":
		ch, err := loader.LoadDir(c.ChartDir)
		if err != nil {
			return nil, fmt.Errorf("config.chart_dir: %w", err)
		}
		return ch, nil
	default:
		return manifestsChart(c.Manifests), nil
	}
}

// PushChart packages the chart in dir and stores it as an OCI artifact in
// the OCI image layout layoutDir (created if missing), tagged tag, the way
// `helm push` lays a chart out. It returns the manifest's digest, for a
// config's chart = "oci:LAYOUT@DIGEST" (or REPO@DIGEST when layoutDir is
// REPO in the install registry). It is for tests and build tools.
func PushChart(ctx context.Context, dir, layoutDir, tag string) (digest.Digest, error) {
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp("", "byoc-chart-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	tgzPath, err := chartutil.Save(ch, tmp)
	if err != nil {
		return "", err
	}
	tgz, err := os.ReadFile(filepath.Clean(tgzPath))
	if err != nil {
		return "", err
	}
	cfg, err := json.Marshal(ch.Metadata)
	if err != nil {
		return "", err
	}
	return pushChartLayer(ctx, cfg, tgz, layoutDir, tag)
}

// pushChartLayer stores a chart's config (Chart.yaml as JSON) and layer
// (its gzipped tar) as PushChart does. The layout is written as
// internal/ocicopy writes one, its index.json replaced whole (oras-go's
// own store rewrites it in place: a crash in between left it torn).
func pushChartLayer(ctx context.Context, cfg, tgz []byte, layoutDir, tag string) (digest.Digest, error) {
	store, err := ocicopy.OpenLayout(ctx, layoutDir)
	if err != nil {
		return "", err
	}
	cfgDesc := content.NewDescriptorFromBytes(registry.ConfigMediaType, cfg)
	layerDesc := content.NewDescriptorFromBytes(registry.ChartLayerMediaType, tgz)
	for _, b := range []struct {
		d ocispec.Descriptor
		b []byte
	}{{cfgDesc, cfg}, {layerDesc, tgz}} {
		if err := store.Push(ctx, b.d, bytes.NewReader(b.b)); err != nil && !strings.Contains(err.Error(), "already exists") {
			return "", err
		}
	}
	desc, err := oras.PackManifest(ctx, store, oras.PackManifestVersion1_1, "", oras.PackManifestOptions{
		ConfigDescriptor: &cfgDesc, Layers: []ocispec.Descriptor{layerDesc},
		// No clock in the manifest (the chart's tar has its own times).
		ManifestAnnotations: map[string]string{ocispec.AnnotationCreated: "1970-01-01T00:00:00Z"},
	})
	if err != nil {
		return "", err
	}
	if tag != "" {
		if err := store.Tag(ctx, desc, tag); err != nil {
			return "", err
		}
	}
	return desc.Digest, nil
}
