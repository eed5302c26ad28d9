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
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
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

// The limits of a chart's entries (files and directories), kept by Pack,
// PackArchive and CheckArchive (which the helm type runs on every chart
// layer before Helm reads it): bytes alone let a small layer of many
// empty files through.
const (
	// MaxEntries bounds a chart's files and directories together.
	MaxEntries = 10_000
	// MaxDepth bounds how many names deep an entry is ("templates/a.yaml"
	// is 2), under the chart's own directory in a layer.
	MaxDepth = 32
)

// entryCounter counts a chart's entries against MaxEntries and MaxDepth.
type entryCounter struct{ n int }

func (c *entryCounter) check(where, name string) error {
	c.n++
	if c.n > MaxEntries {
		return fmt.Errorf("%s: entry %q: the chart has more than %d entries (files and directories), the limit", where, name, MaxEntries)
	}
	if d := len(strings.Split(strings.Trim(name, "/"), "/")); d > MaxDepth {
		return fmt.Errorf("%s: entry %q: %d names deep, over the limit of %d", where, name, d, MaxDepth)
	}
	return nil
}

// CheckArchive reads the entry headers of a chart's gzipped tar (a chart
// layer, NAME/... as helm package writes it) and refuses more than
// MaxEntries entries or one deeper than MaxDepth below the chart's
// directory, naming the entry and the limit. It holds no file's bytes.
func CheckArchive(tgz []byte) error {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return fmt.Errorf("chart layer: %w", err)
	}
	tr := tar.NewReader(zr)
	var c entryCounter
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("chart layer: %w", err)
		}
		_, rest, _ := strings.Cut(strings.TrimPrefix(path.Clean("/"+h.Name), "/"), "/")
		if err := c.check("chart layer", cmp.Or(rest, h.Name)); err != nil {
			return err
		}
	}
}

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
	files := map[string][]byte{}
	total := 0
	var c entryCounter
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel, _ := filepath.Rel(dir, p); rel != "." {
			if err := c.check(dir, filepath.ToSlash(rel)); err != nil {
				return err
			}
		}
		switch {
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			return fmt.Errorf("%s: only regular files go into a chart", p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if total += len(b); total > maxChartBytes {
			return fmt.Errorf("%s: more than %d bytes of files", dir, maxChartBytes)
		}
		rel, _ := filepath.Rel(dir, p)
		files[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		return nil, err
	}
	if _, ok := files["Chart.yaml"]; !ok {
		return nil, fmt.Errorf("%s is not a chart: it has no Chart.yaml", dir)
	}
	return pack(dir, files)
}

// PackArchive packs a chart directory given as a gzipped tar of its
// files (paths relative to the chart directory, as `byoc build package`
// sends it): the same chart packs to the same digest as Pack of the
// directory. Directories are skipped; links, devices, absolute paths,
// ".." and more than 16 MiB of files are refused.
func PackArchive(tgz []byte) (*Chart, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, fmt.Errorf("chart archive: %w", err)
	}
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	total := 0
	var c entryCounter
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("chart archive: %w", err)
		}
		if err := c.check("chart archive", h.Name); err != nil {
			return nil, err
		}
		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		if h.Name == "" || strings.HasPrefix(h.Name, "/") || slices.Contains(strings.Split(h.Name, "/"), "..") {
			return nil, fmt.Errorf("chart archive: entry %q is not a relative path inside the chart", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg:
		default:
			return nil, fmt.Errorf("chart archive: %s: only regular files go into a chart", h.Name)
		}
		if h.Size < 0 || int64(total)+h.Size > maxChartBytes {
			return nil, fmt.Errorf("chart archive: more than %d bytes of files", maxChartBytes)
		}
		b, err := io.ReadAll(io.LimitReader(tr, h.Size))
		if err != nil {
			return nil, fmt.Errorf("chart archive: %s: %w", h.Name, err)
		}
		total += len(b)
		if _, dup := files[name]; dup {
			return nil, fmt.Errorf("chart archive: %s appears twice", name)
		}
		files[name] = b
	}
	if _, ok := files["Chart.yaml"]; !ok {
		return nil, errors.New("chart archive: no Chart.yaml at its top: package the chart's own directory")
	}
	return pack("chart archive", files)
}

// pack packs files (chart-relative slash paths) of the chart named where
// in errors.
func pack(where string, files map[string][]byte) (*Chart, error) {
	chartYAML := path.Join(where, "Chart.yaml")
	if where != "chart archive" {
		chartYAML = filepath.Join(where, "Chart.yaml")
	}
	var doc map[string]any
	if err := yaml.Unmarshal(files["Chart.yaml"], &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", chartYAML, err)
	}
	cfg, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", chartYAML, err)
	}
	var meta struct{ Name, Version string }
	if err := json.Unmarshal(cfg, &meta); err != nil || meta.Name == "" || meta.Version == "" {
		return nil, fmt.Errorf("%s: needs a name and a version", chartYAML)
	}
	if strings.ContainsAny(meta.Name, `/\`) || meta.Name == "." || meta.Name == ".." {
		return nil, fmt.Errorf("%s: name %q is not a chart name", chartYAML, meta.Name)
	}
	names := slices.Sorted(maps.Keys(files))
	var buf bytes.Buffer
	// Stored, not compressed: a compressor's output may change between Go
	// versions, stored blocks do not (charts are small text).
	zw, _ := gzip.NewWriterLevel(&buf, gzip.NoCompression)
	tw := tar.NewWriter(zw)
	for _, rel := range names {
		b := files[rel]
		h := &tar.Header{Name: meta.Name + "/" + rel, Mode: 0o644, Size: int64(len(b)),
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
	d, err := c.PushTo(ctx, r, tag)
	return d.Digest, err
}

// PushTo stores the packed chart in repository r (blobs it already holds
// are skipped), tagged tag when tag is not empty, and returns the
// manifest's descriptor.
func (c *Chart) PushTo(ctx context.Context, r *ocicopy.Repo, tag string) (ocispec.Descriptor, error) {
	md, m, cd, ld := c.manifest()
	for _, b := range []struct {
		d ocispec.Descriptor
		b []byte
	}{{cd, c.Config}, {ld, c.Layer}, {md, m}} {
		ok, err := r.Exists(ctx, b.d)
		if err != nil {
			return ocispec.Descriptor{}, err
		}
		if ok {
			continue
		}
		if err := r.Push(ctx, b.d, bytes.NewReader(b.b)); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
			return ocispec.Descriptor{}, fmt.Errorf("push %s: %w", b.d.MediaType, err)
		}
	}
	if tag != "" {
		if err := r.Tag(ctx, md, tag); err != nil {
			return ocispec.Descriptor{}, err
		}
	}
	return md, nil
}
