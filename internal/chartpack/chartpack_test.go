package chartpack_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/registry"

	"github.com/byoc-dev/byoc/internal/chartpack"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/schema/app/load"
)

// writeExample writes the example app byoc app init writes and returns
// its directory.
func writeExample(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := load.WriteExample(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The example app's helm components name, by digest, exactly the charts
// it ships: packing charts/api and charts/redis gives the digests
// components/api.toml and components/cache.toml name, so they install as
// written once pushed.
func TestExampleChartDigests(t *testing.T) {
	dir := writeExample(t)
	for comp, chart := range map[string]string{"api": "api", "cache": "redis"} {
		c, err := chartpack.Pack(filepath.Join(dir, "charts", chart))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "components", comp+".toml"))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^chart = "charts/` + chart + `@(sha256:[0-9a-f]{64})"$`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("components/%s.toml names no chart charts/%s@sha256:...:\n%s", comp, chart, b)
		}
		if string(m[1]) != c.Digest().String() {
			t.Errorf("components/%s.toml names charts/%s@%s; charts/%s packs to %s: update the toml", comp, chart, m[1], chart, c.Digest())
		}
	}
}

// A packed chart is what Helm reads: the config and layer media types of
// helm push, and an archive Helm's loader loads with every file.
func TestPackIsAHelmChart(t *testing.T) {
	dir := filepath.Join(writeExample(t), "charts", "api")
	c, err := chartpack.Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	if chartpack.ConfigMediaType != registry.ConfigMediaType || chartpack.LayerMediaType != registry.ChartLayerMediaType {
		t.Fatalf("media types %s, %s differ from Helm's", chartpack.ConfigMediaType, chartpack.LayerMediaType)
	}
	ch, err := loader.LoadArchive(bytes.NewReader(c.Layer))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Name() != "api" || ch.Metadata.Version != "0.1.0" || len(ch.Templates) != 1 || ch.Values["retention_days"] != "30" {
		t.Fatalf("loaded %s %s, %d templates, values %v", ch.Name(), ch.Metadata.Version, len(ch.Templates), ch.Values)
	}
	if !strings.Contains(string(c.Config), `"name":"api"`) {
		t.Errorf("config %s", c.Config)
	}
}

// Packing is a function of the files: again, elsewhere, later, it gives
// the same bytes; changing a file changes the digest.
func TestPackDeterministic(t *testing.T) {
	a := filepath.Join(writeExample(t), "charts", "redis")
	b := filepath.Join(writeExample(t), "charts", "redis")
	if err := os.Chtimes(filepath.Join(b, "values.yaml"), chartTime, chartTime); err != nil {
		t.Fatal(err)
	}
	ca, err := chartpack.Pack(a)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := chartpack.Pack(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ca.Layer, cb.Layer) || ca.Digest() != cb.Digest() {
		t.Fatalf("two packs of the same chart differ: %s, %s", ca.Digest(), cb.Digest())
	}
	if err := os.WriteFile(filepath.Join(b, "values.yaml"), []byte("maxmemory: 128mb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if cc, err := chartpack.Pack(b); err != nil || cc.Digest() == ca.Digest() {
		t.Fatalf("a changed chart packs to %v (%v), the same digest", cc, err)
	}
}

// Push stores the chart in the layout repository and tags it; a second
// push changes nothing. A directory without Chart.yaml, and a link in a
// chart, are refused by name.
func TestPush(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(writeExample(t), "charts", "api")
	root := t.TempDir()
	d1, err := chartpack.Push(ctx, dir, "oci:"+root, "charts/api", "0.1.0", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	d2, err := chartpack.Push(ctx, dir, "oci:"+root, "charts/api", "0.1.0", ocicopy.Credentials{})
	if err != nil || d1 != d2 {
		t.Fatalf("second push: %s (%v), first %s", d2, err, d1)
	}
	reg, _ := ocicopy.ParseRegistry("oci:" + root)
	r, err := ocicopy.Open(ctx, reg, "charts/api", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if desc, err := r.Resolve(ctx, "0.1.0"); err != nil || desc.Digest != d1 {
		t.Fatalf("tag 0.1.0 resolves to %v (%v), want %s", desc.Digest, err, d1)
	}
	if _, err := chartpack.Push(ctx, t.TempDir(), "oci:"+root, "charts/x", "", ocicopy.Credentials{}); err == nil || !strings.Contains(err.Error(), "Chart.yaml") {
		t.Errorf("a directory without Chart.yaml: %v", err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "templates", "passwd")); err != nil {
		t.Fatal(err)
	}
	if _, err := chartpack.Pack(dir); err == nil || !strings.Contains(err.Error(), "passwd: only regular files") {
		t.Errorf("a link in a chart: %v", err)
	}
}

var chartTime = time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)

// tgz is a gzipped tar of the given entries, as byoc build package sends
// a directory (directories first, then files, any order).
func tgz(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range entries {
		body := h.Linkname
		if h.Typeflag == tar.TypeReg {
			h.Linkname, h.Size = "", int64(len(body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(body))
		}
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// reg is a regular file entry whose content rides in Linkname (see tgz).
func reg(name, content string) tar.Header {
	return tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o600, Linkname: content}
}

// A chart uploaded as an archive (byoc build package --kind helm) packs to
// the same digest as its directory, whatever the archive's order, modes
// and compression: the build agent's build is what the component names.
func TestPackArchiveMatchesPack(t *testing.T) {
	dir := filepath.Join(writeExample(t), "charts", "api")
	want, err := chartpack.Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	var entries []tar.Header
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			if rel != "." {
				entries = append(entries, tar.Header{Name: rel + "/", Typeflag: tar.TypeDir, Mode: 0o755})
			}
			return nil
		}
		b, _ := os.ReadFile(p)
		// Newest first: the order in the archive must not matter.
		entries = append([]tar.Header{reg(rel, string(b))}, entries...)
		return nil
	})
	got, err := chartpack.PackArchive(tgz(t, entries...))
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest() != want.Digest() {
		t.Fatalf("the archive packs to %s, the directory to %s", got.Digest(), want.Digest())
	}
}

func TestPackArchiveRefuses(t *testing.T) {
	chart := reg("Chart.yaml", "apiVersion: v2\nname: api\nversion: 1.0.0\n")
	for name, tc := range map[string]struct {
		archive []byte
		want    string
	}{
		"not gzip":        {[]byte("plain text, not a gzipped tar"), "chart archive: gzip: invalid header"},
		"no Chart.yaml":   {tgz(t, reg("values.yaml", "a: 1\n")), "no Chart.yaml at its top"},
		"dot dot":         {tgz(t, chart, reg("../etc/passwd", "x")), `entry "../etc/passwd" is not a relative path`},
		"absolute":        {tgz(t, chart, reg("/etc/passwd", "x")), `entry "/etc/passwd" is not a relative path`},
		"symlink":         {tgz(t, chart, tar.Header{Name: "templates/x.yaml", Typeflag: tar.TypeSymlink, Linkname: "/etc/shadow"}), "templates/x.yaml: only regular files"},
		"twice":           {tgz(t, chart, reg("values.yaml", "a"), reg("./values.yaml", "b")), "values.yaml appears twice"},
		"too big":         {tgz(t, chart, reg("big", strings.Repeat("x", 16<<20))), "more than 16777216 bytes"},
		"no version":      {tgz(t, reg("Chart.yaml", "name: api\n")), "needs a name and a version"},
		"name with slash": {tgz(t, reg("Chart.yaml", "name: a/b\nversion: 1.0.0\n")), `name "a/b" is not a chart name`},
		"many entries":    {tgz(t, manyEntries(chart, chartpack.MaxEntries)...), fmt.Sprintf(`chart archive: entry "files/%05d": the chart has more than %d entries (files and directories), the limit`, chartpack.MaxEntries-1, chartpack.MaxEntries)},
		"too deep":        {tgz(t, chart, reg(strings.Repeat("d/", chartpack.MaxDepth)+"x", "")), fmt.Sprintf("33 names deep, over the limit of %d", chartpack.MaxDepth)},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := chartpack.PackArchive(tc.archive)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("PackArchive: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// manyEntries is first and n empty files under files/.
func manyEntries(first tar.Header, n int) []tar.Header {
	out := []tar.Header{first}
	for i := range n {
		out = append(out, reg(fmt.Sprintf("files/%05d", i), ""))
	}
	return out
}

// A chart layer (NAME/... entries) of more entries than MaxEntries, or
// one too deep, is refused by CheckArchive however few bytes it has; a
// packed chart passes.
func TestCheckArchive(t *testing.T) {
	c, err := chartpack.Pack(filepath.Join(writeExample(t), "charts", "api"))
	if err != nil {
		t.Fatal(err)
	}
	if err := chartpack.CheckArchive(c.Layer); err != nil {
		t.Fatal(err)
	}
	var entries []tar.Header
	for _, h := range manyEntries(reg("api/Chart.yaml", "name: api\nversion: 1.0.0\n"), chartpack.MaxEntries) {
		h.Name = strings.Replace(h.Name, "files/", "api/files/", 1)
		entries = append(entries, h)
	}
	layer := tgz(t, entries...)
	want := fmt.Sprintf(`chart layer: entry "files/%05d": the chart has more than %d entries (files and directories), the limit`, chartpack.MaxEntries-1, chartpack.MaxEntries)
	if err := chartpack.CheckArchive(layer); err == nil || err.Error() != want {
		t.Fatalf("CheckArchive of %d empty files (%d bytes): %v, want %q", len(entries), len(layer), err, want)
	}
	// The chart's own directory does not count towards the depth.
	if err := chartpack.CheckArchive(tgz(t, reg("api/"+strings.Repeat("d/", chartpack.MaxDepth-1)+"x", ""))); err != nil {
		t.Fatal(err)
	}
	if err := chartpack.CheckArchive(tgz(t, reg("api/"+strings.Repeat("d/", chartpack.MaxDepth)+"x", ""))); err == nil || !strings.Contains(err.Error(), "33 names deep") {
		t.Fatalf("CheckArchive of a deep entry: %v", err)
	}
}
