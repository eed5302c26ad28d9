// Package bundleload loads the artifacts of an unpacked offline bundle (an
// OCI image layout root) into the install registry, several at once.
package bundleload

import (
	"context"
	"fmt"
	"sync"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/errgroup"

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

// LoadParallel is how many artifacts LoadImages copies at once (each
// copies its blobs in parallel too, ocicopy.DefaultConcurrency).
const LoadParallel = 4

// LoadImages copies every artifact of loads, with its referrers, from the
// layout root into reg, several at once: blobs the registry holds are
// not sent, and no manifest is pushed before its blobs are there
// (ocicopy). The first error stops the others and names its artifact.
func LoadImages(ctx context.Context, layout, reg ocicopy.Registry, creds ocicopy.Credentials, loads []Load) (LoadStats, error) {
	var st LoadStats
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(LoadParallel)
	for _, l := range loads {
		g.Go(func() error {
			s, err := ocicopy.Open(gctx, layout, l.Repository, ocicopy.Credentials{})
			if err != nil {
				return fmt.Errorf("%s@%s: the bundle's layout: %w", l.Repository, l.Digest, err)
			}
			defer s.Close()
			d, err := ocicopy.Open(gctx, reg, l.Target, creds)
			if err != nil {
				return fmt.Errorf("%s@%s: the install registry: %w", l.Target, l.Digest, err)
			}
			defer d.Close()
			res, err := ocicopy.Copy(gctx, s, d, l.Digest, ocicopy.Options{})
			if err != nil {
				return fmt.Errorf("load %s@%s into the install registry as %s: %w", l.Repository, l.Digest, l.Target, err)
			}
			mu.Lock()
			st.Artifacts++
			st.BlobsSent += res.BlobsCopied
			st.BlobsHeld += res.BlobsSkipped
			st.ManifestsSent += res.ManifestsCopied
			st.BlobBytes += res.BlobBytes
			mu.Unlock()
			return nil
		})
	}
	return st, g.Wait()
}
