// Package bundleload loads the artifacts of an offline bundle (an OCI
// image layout root in the bundle) into the install registry, several at
// once: the large blobs straight from their byte ranges in the bundle's
// tar (internal/bundlefile Open), the rest from the files unpacked
// beside it.
package bundleload

import (
	"context"
	"fmt"
	"io"
	"path"
	"regexp"
	"sync"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"
	"oras.land/oras-go/v2/errdef"

	"github.com/byoc-dev/byoc/internal/bundlefile"
	"github.com/byoc-dev/byoc/internal/ocicopy"
)

// Load is one artifact of a bundle's OCI image layout root to load into
// the install registry: repository Repository of the layout, root
// Digest, into repository Target of the registry.
type Load struct {
	Repository, Target string
	Digest             digest.Digest
}

// LoadStats is what LoadImages moved.
type LoadStats struct {
	Artifacts                           int
	BlobsSent, BlobsHeld, ManifestsSent int
	BlobBytes                           int64
}

// LoadParallel is how many artifacts LoadImages plans and copies at
// once (each copies its blobs in parallel too, ocicopy.DefaultConcurrency).
const LoadParallel = 4

// LayoutDir is the bundle's OCI image layout root, relative to the
// bundle's root.
const LayoutDir = "oci"

// StreamMin is the size above which a blob of the bundle's layout is
// served from the tar rather than unpacked: no manifest is that large
// (ocicopy.MaxManifestBytes), so every manifest, index.json and the
// small blobs stay readable as a directory (by the jobs' plugins, the
// release checks), and the layers stream.
const StreamMin = ocicopy.MaxManifestBytes

var blobPath = regexp.MustCompile(`^` + LayoutDir + `/(.+)/blobs/sha256/([0-9a-f]{64})$`)

// Stream reports whether a bundle's file is a blob of the layout that
// LoadImages reads from the tar (bundlefile.Open's stream argument): a
// sha256 blob larger than StreamMin whose name is the manifest's SHA-256
// of it (so hashing it against the signed manifest is hashing it against
// its digest).
func Stream(f bundlefile.File) bool {
	m := blobPath.FindStringSubmatch(f.Path)
	return m != nil && m[2] == f.SHA256 && f.Size > StreamMin && ocicopy.ValidRepository(m[1])
}

// Source is what LoadImages reads: the layout root unpacked from a
// bundle, and the bundle, which serves the blobs that were not unpacked
// (nil: the layout holds every blob).
type Source struct {
	Layout ocicopy.Registry
	Bundle *bundlefile.Bundle
}

// open opens a repository of the source.
func (s Source) open(ctx context.Context, repository string) (*ocicopy.Repo, error) {
	r, err := ocicopy.Open(ctx, s.Layout, repository, ocicopy.Credentials{})
	if err != nil || s.Bundle == nil {
		return r, err
	}
	b := s.Bundle
	r.ServeBlobs(func(_ context.Context, desc ocispec.Descriptor) (io.ReadCloser, error) {
		p := path.Join(LayoutDir, repository, "blobs", desc.Digest.Algorithm().String(), desc.Digest.Encoded())
		if !b.Streamed(p) {
			return nil, fmt.Errorf("%s: %w", p, errdef.ErrNotFound)
		}
		return b.OpenFile(p)
	})
	return r, nil
}

// Has reports whether the source holds repository's blob d, unpacked or
// in the tar.
func (s Source) Has(repository string, d digest.Digest) bool {
	if s.Bundle != nil && s.Bundle.Streamed(path.Join(LayoutDir, repository, "blobs", d.Algorithm().String(), d.Encoded())) {
		return true
	}
	r, err := ocicopy.Open(context.Background(), s.Layout, repository, ocicopy.Credentials{})
	if err != nil {
		return false
	}
	defer r.Close()
	ok, err := r.Exists(context.Background(), ocispec.Descriptor{Digest: d})
	return err == nil && ok
}

// LoadImages copies every artifact of loads, with its referrers, from
// src into reg: it plans every copy (blobs the registry holds are not
// sent), copies every missing blob of every artifact, and only once all
// of them are there pushes the manifests. So a blob that fails (a
// layer of the bundle that does not match its signed manifest: the
// error names the file) leaves no image loaded, at most blobs nothing
// references. The first error stops the others and names its artifact.
func LoadImages(ctx context.Context, src Source, reg ocicopy.Registry, creds ocicopy.Credentials, loads []Load) (LoadStats, error) {
	type copyOf struct {
		l    Load
		s, d *ocicopy.Repo
		plan *ocicopy.Plan
		res  *ocicopy.Result
	}
	copies := make([]*copyOf, len(loads))
	defer func() {
		for _, c := range copies {
			if c != nil {
				c.s.Close()
				c.d.Close()
			}
		}
	}()
	each := func(f func(i int, c *copyOf) error) error {
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(LoadParallel)
		for i := range copies {
			g.Go(func() error {
				if err := gctx.Err(); err != nil {
					return context.Cause(gctx)
				}
				return f(i, copies[i])
			})
		}
		return g.Wait()
	}
	var mu sync.Mutex
	err := each(func(i int, _ *copyOf) error {
		l := loads[i]
		s, err := src.open(ctx, l.Repository)
		if err != nil {
			return fmt.Errorf("%s@%s: the bundle's layout: %w", l.Repository, l.Digest, err)
		}
		d, err := ocicopy.Open(ctx, reg, l.Target, creds)
		if err != nil {
			s.Close()
			return fmt.Errorf("%s@%s: the install registry: %w", l.Target, l.Digest, err)
		}
		c := &copyOf{l: l, s: s, d: d}
		mu.Lock()
		copies[i] = c
		mu.Unlock()
		if c.plan, err = ocicopy.PlanCopy(ctx, s, d, l.Digest, ocicopy.Options{RefuseImageReferrers: true}); err != nil {
			return fmt.Errorf("load %s@%s into the install registry as %s: %w", l.Repository, l.Digest, l.Target, err)
		}
		return nil
	})
	if err != nil {
		return LoadStats{}, err
	}
	var st LoadStats
	err = each(func(_ int, c *copyOf) error {
		res, err := c.plan.ApplyBlobs(ctx, ocicopy.Options{})
		mu.Lock()
		st.BlobsSent += res.BlobsCopied
		st.BlobBytes += res.BlobBytes
		mu.Unlock()
		c.res = res
		if err != nil {
			return fmt.Errorf("load %s@%s into the install registry as %s: %w", c.l.Repository, c.l.Digest, c.l.Target, err)
		}
		return nil
	})
	if err != nil {
		return st, err
	}
	for _, c := range copies {
		if err := c.plan.ApplyManifests(ctx, ocicopy.Options{}, c.res); err != nil {
			return st, fmt.Errorf("load %s@%s into the install registry as %s: %w", c.l.Repository, c.l.Digest, c.l.Target, err)
		}
		st.Artifacts++
		st.BlobsHeld += c.res.BlobsSkipped
		st.ManifestsSent += c.res.ManifestsCopied
	}
	return st, nil
}
