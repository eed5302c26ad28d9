package registrytest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/memory"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// Repo opens repository name on host over plain HTTP, with token as its
// bearer token when set.
func Repo(tb testing.TB, host, name, token string) *remote.Repository {
	tb.Helper()
	r, err := remote.NewRepository(host + "/" + name)
	if err != nil {
		tb.Fatal(err)
	}
	r.PlainHTTP = true
	if token != "" {
		r.Client = &auth.Client{Credential: auth.StaticCredential(host, auth.Credential{AccessToken: token})}
	}
	return r
}

func push(ctx context.Context, tb testing.TB, s *memory.Store, mediaType string, b []byte) ocispec.Descriptor {
	tb.Helper()
	d := ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(b), Size: int64(len(b))}
	if err := s.Push(ctx, d, bytes.NewReader(b)); err != nil {
		tb.Fatal(err)
	}
	return d
}

func image(ctx context.Context, tb testing.TB, s *memory.Store, arch string, layerBytes int) ocispec.Descriptor {
	tb.Helper()
	layer := make([]byte, layerBytes)
	_, _ = rand.Read(layer)
	ld := push(ctx, tb, s, ocispec.MediaTypeImageLayer, layer)
	cfg, _ := json.Marshal(ocispec.Image{Platform: ocispec.Platform{Architecture: arch, OS: "linux"},
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{ld.Digest}}})
	cd := push(ctx, tb, s, ocispec.MediaTypeImageConfig, cfg)
	m, _ := json.Marshal(ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: cd, Layers: []ocispec.Descriptor{ld}})
	d := push(ctx, tb, s, ocispec.MediaTypeImageManifest, m)
	d.Platform = &ocispec.Platform{Architecture: arch, OS: "linux"}
	return d
}

// PushImage pushes a small single-platform image (random layer of
// layerBytes) to repo as tag and returns its manifest's descriptor.
func PushImage(tb testing.TB, repo *remote.Repository, tag string, layerBytes int) ocispec.Descriptor {
	tb.Helper()
	d, err := TryPushImage(tb, repo, tag, layerBytes)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// TryPushImage is PushImage returning the push's error.
func TryPushImage(tb testing.TB, repo *remote.Repository, tag string, layerBytes int) (ocispec.Descriptor, error) {
	tb.Helper()
	ctx := context.Background()
	s := memory.New()
	d := image(ctx, tb, s, "amd64", layerBytes)
	d.Platform = nil
	if err := s.Tag(ctx, d, tag); err != nil {
		tb.Fatal(err)
	}
	if _, err := oras.Copy(ctx, s, tag, repo, tag, oras.DefaultCopyOptions); err != nil {
		return d, fmt.Errorf("push image to %s: %w", repo.Reference, err)
	}
	return d, nil
}

// PushIndex pushes a multi-arch index (amd64 and arm64 images) to repo as
// tag and returns the index's descriptor.
func PushIndex(tb testing.TB, repo *remote.Repository, tag string, layerBytes int) ocispec.Descriptor {
	tb.Helper()
	ctx := context.Background()
	s := memory.New()
	ms := []ocispec.Descriptor{image(ctx, tb, s, "amd64", layerBytes), image(ctx, tb, s, "arm64", layerBytes)}
	b, _ := json.Marshal(ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex, Manifests: ms})
	d := push(ctx, tb, s, ocispec.MediaTypeImageIndex, b)
	if err := s.Tag(ctx, d, tag); err != nil {
		tb.Fatal(err)
	}
	if _, err := oras.Copy(ctx, s, tag, repo, tag, oras.DefaultCopyOptions); err != nil {
		tb.Fatalf("push index to %s: %v", repo.Reference, err)
	}
	return d
}
