package ocicopy_test

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
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/registry"

	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
)

// layoutEntries are the entries of the layout index.json in dir, as
// "DIGEST TAG" lines, sorted.
func layoutEntries(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx ocispec.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatalf("index.json: %v\n%s", err, b)
	}
	var out []string
	for _, d := range idx.Manifests {
		out = append(out, d.Digest.String()+" "+d.Annotations[ocispec.AnnotationRefName])
	}
	slices.Sort(out)
	return out
}

// A layout repository's index.json is replaced whole, never rewritten in
// place (oras-go's store truncates it, then writes: a crash in between
// left it empty, and the install registry would not open again); it
// lists what oras-go's own store lists after the same pushes and tags;
// and one torn by an earlier writer is an error naming the file, not an
// empty repository.
func TestLayoutIndexWrittenWhole(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	repo := open(t, "oci:"+root, "install/api", ocicopy.Credentials{})
	dir := filepath.Join(root, "install", "api")
	// The same pushes and tags into oras-go's own store, which saves its
	// index itself: what byoc's index must list too.
	theirsDir := t.TempDir()
	theirs, err := oci.NewWithContext(ctx, theirsDir)
	if err != nil {
		t.Fatal(err)
	}
	var imgs []ocispec.Descriptor
	var old []byte
	for i := range 3 {
		if i == 2 {
			// index.json's file as it is before this push, under
			// another name: a whole replacement leaves it as it was.
			if err := os.Link(filepath.Join(dir, "index.json"), filepath.Join(root, "old-index")); err != nil {
				t.Fatal(err)
			}
			old, _ = os.ReadFile(filepath.Join(root, "old-index"))
		}
		spec := ocitest.ImageSpec{Seed: uint64(10 * i), Layers: []int64{100}}
		d, err := ocitest.Image(ctx, repo, spec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ocitest.Image(ctx, theirs, spec); err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, d)
	}
	if now, _ := os.ReadFile(filepath.Join(root, "old-index")); !bytes.Equal(now, old) || len(old) == 0 {
		t.Fatalf("index.json was rewritten in place:\nbefore the push %s\nits file after %s", old, now)
	}
	for _, p := range []content.Pusher{repo, theirs} {
		if _, err := ocitest.Artifact(ctx, p, imgs[0], "application/vnd.dev.cosign.artifact.sig.v1+json", []byte("sig")); err != nil {
			t.Fatal(err)
		}
	}
	// Tags, one moved: the manifest it named stays listed, untagged.
	for _, tg := range []struct {
		d   ocispec.Descriptor
		ref string
	}{{imgs[0], "v1"}, {imgs[1], "v1"}, {imgs[1], "stable"}, {imgs[2], "v2"}, {imgs[2], "v2"}} {
		if err := repo.Tag(ctx, tg.d, tg.ref); err != nil {
			t.Fatal(err)
		}
		if err := theirs.Tag(ctx, tg.d, tg.ref); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := layoutEntries(t, dir), layoutEntries(t, theirsDir); !slices.Equal(got, want) || len(got) != 5 {
		t.Fatalf("index.json lists:\n%s\noras-go's store lists:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Opened again: the tags, the manifests and the signature's link to
	// its subject (through the index) are all there.
	again := open(t, "oci:"+root, "install/api", ocicopy.Credentials{})
	if d, err := again.Resolve(ctx, "v1"); err != nil || d.Digest != imgs[1].Digest {
		t.Fatalf("v1 after a reopen: %v, %v", d.Digest, err)
	}
	st, err := oci.NewWithContext(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if refs, err := registry.Referrers(ctx, st, imgs[0], ""); err != nil || len(refs) != 1 {
		t.Fatalf("the signature's subject after a reopen: %v, %v", refs, err)
	}

	// Torn by a writer that wrote it in place (an older agentd, another
	// tool) and crashed: a clear error naming the file.
	b, _ := os.ReadFile(filepath.Join(dir, "index.json"))
	reg, _ := ocicopy.ParseRegistry("oci:" + root)
	for _, torn := range [][]byte{nil, b[:len(b)/2]} {
		if err := os.WriteFile(filepath.Join(dir, "index.json"), torn, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ocicopy.Open(ctx, reg, "install/api", ocicopy.Credentials{})
		if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "index.json")+" is not a whole OCI layout file (") || !strings.Contains(err.Error(), "restore the file from a backup") {
			t.Fatalf("a torn index.json (%d bytes): %v", len(torn), err)
		}
	}
}
