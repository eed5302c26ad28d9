// Package chartpack packs a Helm chart directory as the OCI artifact
// `helm push` makes (config application/vnd.cncf.helm.config.v1+json,
// one layer application/vnd.cncf.helm.chart.content.v1.tar+gzip), with
// bytes that are a function of the chart's files only: fixed times,
// owners and modes, names sorted, no gzip header time. So the same chart
// has the same digest on every machine, and an app config can name it
// before it is pushed (the example app that `byoc app init` writes does).
//
// It links no Helm or Kubernetes package (only a YAML reader), and lives
// outside plugins/helm, so agentd
// can use it: `agentd module push --kind helm` puts a chart into the
// install registry with it, where the helm type reads it.
package chartpack

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"go.yaml.in/yaml/v3"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"

	"github.com/byoc-dev/byoc/internal/ocicopy"
)

// Media types of a Helm chart in an OCI registry (as helm.sh/helm/v3's
// registry package names them).
const (
	ConfigMediaType = "application/vnd.cncf.helm.config.v1+json"
	LayerMediaType  = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

// maxChartBytes bounds the files of a chart: charts are text.
const maxChartBytes = 16 << 20

// Chart is a packed chart.
type Chart struct {
	Name, Version string
	Config        []byte // Chart.yaml as JSON
	Layer         []byte // the chart as a gzipped tar, NAME/... as helm package writes it
}

// Pack packs the chart directory dir. Every regular file under dir goes
// into the layer as NAME/PATH (NAME from Chart.yaml); symbolic links and
// other special files are refused.
func Pack(dir string) (*Chart, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, fmt.Errorf("%s is not a chart: %w", dir, err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "Chart.yaml"), err)
	}
	cfg, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "Chart.yaml"), err)
	}
	var meta struct{ Name, Version string }
	if err := json.Unmarshal(cfg, &meta); err != nil || meta.Name == "" || meta.Version == "" {
		return nil, fmt.Errorf("%s: needs a name and a version", filepath.Join(dir, "Chart.yaml"))
	}
	if strings.ContainsAny(meta.Name, `/\`) || meta.Name == "." || meta.Name == ".." {
		return nil, fmt.Errorf("%s: name %q is not a chart name", filepath.Join(dir, "Chart.yaml"), meta.Name)
	}
	var files []string
	total := 0
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			return fmt.Errorf("%s: only regular files go into a chart", p)
		}
		files = append(files, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	var buf bytes.Buffer
	// Stored, not compressed: a compressor's output may change between Go
	// versions, stored blocks do not (charts are small text).
	zw, _ := gzip.NewWriterLevel(&buf, gzip.NoCompression)
	tw := tar.NewWriter(zw)
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		if total += len(b); total > maxChartBytes {
			return nil, fmt.Errorf("%s: more than %d bytes of files", dir, maxChartBytes)
		}
		rel, _ := filepath.Rel(dir, p)
		h := &tar.Header{Name: meta.Name + "/" + filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(b)),
			ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return &Chart{Name: meta.Name, Version: meta.Version, Config: cfg, Layer: buf.Bytes()}, nil
}

// manifest returns the chart's manifest (with a fixed creation time, so
// its digest is a function of the files) and its blobs.
func (c *Chart) manifest() (ocispec.Descriptor, []byte, ocispec.Descriptor, ocispec.Descriptor) {
	cd := content.NewDescriptorFromBytes(ConfigMediaType, c.Config)
	ld := content.NewDescriptorFromBytes(LayerMediaType, c.Layer)
	m, _ := json.Marshal(ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    cd,
		Layers:    []ocispec.Descriptor{ld},
		Annotations: map[string]string{
			ocispec.AnnotationCreated: "1970-01-01T00:00:00Z",
			ocispec.AnnotationTitle:   c.Name,
			ocispec.AnnotationVersion: c.Version,
		},
	})
	return content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, m), m, cd, ld
}

// Digest is the digest of the chart's manifest: what a component's
// chart = "REPO@DIGEST" names.
func (c *Chart) Digest() digest.Digest {
	md, _, _, _ := c.manifest()
	return md.Digest
}

// Push packs the chart in dir and stores it in repository repo of the
// registry location (internal/ocicopy's syntax: oci:DIR is an OCI layout
// root, or a registry server), tagged tag when tag is not empty. It
// returns the manifest's digest.
func Push(ctx context.Context, dir, location, repo, tag string, creds ocicopy.Credentials) (digest.Digest, error) {
	c, err := Pack(dir)
	if err != nil {
		return "", err
	}
	if !ocicopy.ValidRepository(repo) {
		return "", fmt.Errorf("%q is not a repository name", repo)
	}
	reg, err := ocicopy.ParseRegistry(location)
	if err != nil {
		return "", err
	}
	r, err := ocicopy.Open(ctx, reg, repo, creds)
	if err != nil {
		return "", err
	}
	defer r.Close()
	md, m, cd, ld := c.manifest()
	for _, b := range []struct {
		d ocispec.Descriptor
		b []byte
	}{{cd, c.Config}, {ld, c.Layer}, {md, m}} {
		ok, err := r.Exists(ctx, b.d)
		if err != nil {
			return "", err
		}
		if ok {
			continue
		}
		if err := r.Push(ctx, b.d, bytes.NewReader(b.b)); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
			return "", fmt.Errorf("push %s: %w", b.d.MediaType, err)
		}
	}
	if tag != "" {
		if err := r.Tag(ctx, md, tag); err != nil {
			return "", err
		}
	}
	return md.Digest, nil
}
