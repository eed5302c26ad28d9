package helm

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/byoc-dev/byoc/internal/ocicopy"
)

// TestPushChartIndexWrittenWhole: PushChart replaces a layout's
// index.json whole, never rewrites it in place (oras-go's store, which
// it wrote through before, truncated the file and then wrote it: a crash
// in between left an empty index.json and a layout that would not open);
// the index lists every tag pushed; and a torn index.json is an error
// naming the file, not a layout silently started again.
func TestPushChartIndexWrittenWhole(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	layout := filepath.Join(root, "charts")
	first, err := PushChart(ctx, "testdata/web", layout, "1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	// index.json's file before the next push, under another name: a
	// whole replacement leaves it as it was.
	index := filepath.Join(layout, "index.json")
	if err := os.Link(index, filepath.Join(root, "old-index")); err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(filepath.Join(root, "old-index"))
	second, err := pushChartLayer(ctx, []byte(`{"apiVersion":"v2","name":"web","version":"2.0.0"}`), []byte("not a chart, a layer"), layout, "2.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if now, _ := os.ReadFile(filepath.Join(root, "old-index")); !bytes.Equal(now, old) || len(old) == 0 {
		t.Fatalf("index.json was rewritten in place:\nbefore the push %s\nits file after %s", old, now)
	}
	b, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	var idx ocispec.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatalf("index.json: %v\n%s", err, b)
	}
	var got []string
	for _, d := range idx.Manifests {
		got = append(got, d.Annotations[ocispec.AnnotationRefName]+" "+d.Digest.String())
	}
	slices.Sort(got)
	if want := []string{"1.0.0 " + first.String(), "2.0.0 " + second.String()}; !slices.Equal(got, want) {
		t.Fatalf("index.json lists %q, want %q", got, want)
	}
	repo, err := ocicopy.OpenLayout(ctx, layout)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := repo.Resolve(ctx, "1.0.0"); err != nil || d.Digest != first {
		t.Fatalf("1.0.0 after the pushes: %v, %v", d.Digest, err)
	}

	// Torn by a writer that wrote it in place and crashed: the next push
	// says so, naming the file, rather than writing a new index that
	// forgets the charts the torn one listed.
	if err := os.WriteFile(index, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = PushChart(ctx, "testdata/web", layout, "1.0.1")
	if err == nil || !strings.Contains(err.Error(), index+" is not a whole OCI layout file") {
		t.Fatalf("a push onto a torn index.json: %v", err)
	}
}
