// Package demoimage packs the demo's image: a tiny OCI image (one
// uncompressed layer holding a greeting, a config without times) whose
// bytes, and so whose digest, are the same on every machine and Go
// version. make demo syncs it through the vendor registry into an install
// registry, and the example app that byoc app init writes names its
// digest (components/web.toml), so that its image component deploys for
// real once the demo's build agent has synced it.
package demoimage

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
)

// Tag is the tag the demo image is written under.
const Tag = "1.0"

// Repository is the vendor repository the demo syncs it to.
const Repository = "acme/web"

// Blobs returns the image's manifest descriptor and every blob (layer,
// config, manifest) by digest.
func Blobs() (ocispec.Descriptor, map[digest.Digest][]byte, []ocispec.Descriptor) {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	for _, f := range []struct{ name, body string }{
		{"hello.txt", "Hello from byoc: this image came from the vendor registry by digest, with its lineage.\n"},
		{"etc/byoc-demo", "demo\n"},
	} {
		// Fixed times, owners and format: the same bytes everywhere.
		_ = tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg, Format: tar.FormatUSTAR})
		_, _ = tw.Write([]byte(f.body))
	}
	_ = tw.Close()
	ld := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: sum(layer.Bytes()), Size: int64(layer.Len())}
	cfg, _ := json.Marshal(ocispec.Image{
		Platform: ocispec.Platform{Architecture: "amd64", OS: "linux"},
		Config:   ocispec.ImageConfig{Cmd: []string{"cat", "/hello.txt"}, Labels: map[string]string{"org.opencontainers.image.title": "byoc demo"}},
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{ld.Digest}},
	})
	cd := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: sum(cfg), Size: int64(len(cfg))}
	m, _ := json.Marshal(ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: cd, Layers: []ocispec.Descriptor{ld}})
	md := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: sum(m), Size: int64(len(m))}
	blobs := map[digest.Digest][]byte{ld.Digest: layer.Bytes(), cd.Digest: cfg, md.Digest: m}
	return md, blobs, []ocispec.Descriptor{ld, cd, md}
}

// Digest is the demo image's manifest digest.
func Digest() digest.Digest {
	d, _, _ := Blobs()
	return d.Digest
}

// Target is where Write puts the image (an OCI layout store, a registry
// repository: any oras target).
type Target interface {
	content.Pusher
	Exists(ctx context.Context, d ocispec.Descriptor) (bool, error)
	Tag(ctx context.Context, d ocispec.Descriptor, ref string) error
}

// Write pushes the image into t, children first, and tags it Tag.
func Write(ctx context.Context, t Target) (ocispec.Descriptor, error) {
	root, blobs, order := Blobs()
	for _, d := range order {
		ok, err := t.Exists(ctx, d)
		if err != nil {
			return root, err
		}
		if ok {
			continue
		}
		if err := t.Push(ctx, d, bytes.NewReader(blobs[d.Digest])); err != nil {
			return root, fmt.Errorf("push %s: %w", d.Digest, err)
		}
	}
	return root, t.Tag(ctx, root, Tag)
}

// sum is b's sha256 digest (computed here, so that no hash needs
// registering with go-digest).
func sum(b []byte) digest.Digest {
	h := sha256.Sum256(b)
	return digest.NewDigestFromBytes(digest.SHA256, h[:])
}
