package chartpack_test

import (
	"bytes"
	"context"
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
