package ocicopy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"sync/atomic"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote/errcode"
)

// Result is what an Apply did.
type Result struct {
	// Root is the copied root: digest, size (of the root manifest) and
	// media type.
	Root ocispec.Descriptor
	// TotalBytes is the size of all the graph's content.
	TotalBytes int64
	// BytesTransferred counts the blob and manifest bytes sent to the
	// destination by this Apply; BlobBytes the blobs' part of it (zero
	// when the destination had every blob).
	BytesTransferred, BlobBytes       int64
	BlobsCopied, BlobsSkipped         int
	ManifestsCopied, ManifestsSkipped int
}

// Copy plans and applies a copy of root from src to dst.
func Copy(ctx context.Context, src, dst *Repo, root digest.Digest, opts Options) (*Result, error) {
	p, err := PlanCopy(ctx, src, dst, root, opts)
	if err != nil {
		return nil, err
	}
	return p.Apply(ctx, opts)
}

// Apply copies what the plan found missing: every missing blob (in
// parallel, largest first, each checked against its digest and size: by
// the destination as it takes it, and with Options.LocalVerify here too,
// so that the destination never gets the last bytes of a blob that does
// not match), then, only once every blob is there, the missing
// manifests children first, the root's before its referrers. So if the
// source fails during Apply, the destination gained unreferenced blobs
// at most. It is ApplyBlobs, then ApplyManifests.
func (p *Plan) Apply(ctx context.Context, opts Options) (*Result, error) {
	res, err := p.ApplyBlobs(ctx, opts)
	if err != nil {
		return res, err
	}
	return res, p.ApplyManifests(ctx, opts, res)
}

// ApplyBlobs copies the missing blobs (Apply's first half); a caller
// copying several graphs can push their manifests (ApplyManifests) only
// once every graph's blobs are there.
func (p *Plan) ApplyBlobs(ctx context.Context, opts Options) (*Result, error) {
	res := &Result{Root: p.Root, TotalBytes: p.TotalBytes}
	var blobs []Node
	for _, n := range p.Nodes {
		switch {
		case n.Manifest && n.Present:
			res.ManifestsSkipped++
		case !n.Manifest && n.Present:
			res.BlobsSkipped++
		case !n.Manifest:
			blobs = append(blobs, n)
		}
	}
	slices.SortStableFunc(blobs, func(a, b Node) int { return int(min(max(b.Descriptor.Size-a.Descriptor.Size, -1), 1)) })
	sent := opts.Sent
	if sent == nil {
		sent = new(atomic.Int64)
	}
	start := sent.Load()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(opts.concurrency())
	var copied atomic.Int64
	for _, n := range blobs {
		g.Go(func() error {
			did, err := p.copyBlob(gctx, n.Descriptor, sent, opts)
			if did {
				copied.Add(1)
			}
			return err
		})
	}
	err := g.Wait()
	res.BlobBytes = sent.Load() - start
	res.BytesTransferred = res.BlobBytes
	res.BlobsCopied = int(copied.Load())
	res.BlobsSkipped += len(blobs) - res.BlobsCopied
	if err != nil {
		if ctx.Err() != nil {
			return res, fmt.Errorf("copy %s: %w", p.Root.Digest, context.Cause(ctx))
		}
		return res, err
	}
	return res, nil
}

// ApplyManifests pushes the missing manifests, children first, adding
// to res (from ApplyBlobs, which must have succeeded).
func (p *Plan) ApplyManifests(ctx context.Context, opts Options, res *Result) error {
	for _, n := range p.Nodes {
		if !n.Manifest || n.Present {
			continue
		}
		if opts.Progress != nil {
			opts.Progress(Event{Descriptor: n.Descriptor, Manifest: true})
		}
		err := p.Dst.Push(ctx, n.Descriptor, bytes.NewReader(n.raw))
		if n.Tag != "" && (err == nil || errors.Is(err, errdef.ErrAlreadyExists)) {
			if terr := p.Dst.Tag(ctx, n.Descriptor, n.Tag); terr != nil {
				return sideError(Destination, p.Dst, "tag "+n.Tag+" in", terr)
			}
		}
		if errors.Is(err, errdef.ErrAlreadyExists) {
			res.ManifestsSkipped++
			continue
		}
		if err != nil {
			return sideError(Destination, p.Dst, "push manifest "+n.Descriptor.Digest.String()+" to", err)
		}
		res.ManifestsCopied++
		res.BytesTransferred += n.Descriptor.Size
		if opts.Progress != nil {
			opts.Progress(Event{Descriptor: n.Descriptor, Manifest: true, Done: true})
		}
	}
	return nil
}

// copyBlob streams one blob from the source to the destination. It
// reports whether the blob was sent (false when the destination already
// had it).
func (p *Plan) copyBlob(ctx context.Context, desc ocispec.Descriptor, sent *atomic.Int64, opts Options) (bool, error) {
	progress := opts.Progress
	if progress != nil {
		progress(Event{Descriptor: desc})
	}
	rc, err := p.Src.Fetch(ctx, desc)
	if err != nil {
		return false, sideError(Source, p.Src, "fetch blob "+desc.Digest.String()+" from", err)
	}
	defer rc.Close()
	vr := &verifyReader{r: rc, desc: desc, sent: sent}
	if opts.LocalVerify {
		vr.h = desc.Digest.Algorithm().Hash()
	}
	err = p.Dst.Push(ctx, desc, vr)
	switch {
	case vr.srcErr != nil:
		return false, sideError(Source, p.Src, "read blob "+desc.Digest.String()+" from", vr.srcErr)
	case vr.verifyErr != nil:
		return false, fmt.Errorf("blob %s from %s: %w", desc.Digest, p.Src.Name(), vr.verifyErr)
	case errors.Is(err, errdef.ErrAlreadyExists):
		return false, nil
	case refusedDigest(err):
		return false, fmt.Errorf("blob %s from %s: %w: %s refused it: %v", desc.Digest, p.Src.Name(), ErrDigestMismatch, p.Dst.Name(), err)
	case err != nil:
		return false, sideError(Destination, p.Dst, "push blob "+desc.Digest.String()+" to", err)
	}
	if progress != nil {
		progress(Event{Descriptor: desc, Done: true})
	}
	return true, nil
}

// refusedDigest reports a destination refusing a blob for not matching
// its digest or size.
func refusedDigest(err error) bool {
	if errors.Is(err, content.ErrMismatchedDigest) || errors.Is(err, content.ErrTrailingData) {
		return true
	}
	var resp *errcode.ErrorResponse
	if errors.As(err, &resp) {
		for _, e := range resp.Errors {
			if e.Code == errcode.ErrorCodeDigestInvalid || e.Code == errcode.ErrorCodeSizeInvalid {
				return true
			}
		}
	}
	return false
}

// verifyReader counts a blob's bytes while the destination reads it, and
// stops a source that sends fewer or more than its size. With a hash
// (Options.LocalVerify) it also hashes them and withholds the last bytes
// unless they complete the expected digest: the destination never
// receives a whole blob that does not match. It keeps apart the source's
// read errors from the check's.
type verifyReader struct {
	r         io.Reader
	desc      ocispec.Descriptor
	h         hash.Hash
	n         int64
	sent      *atomic.Int64
	srcErr    error
	verifyErr error
}

// ErrDigestMismatch is a blob whose content does not match its
// descriptor.
var ErrDigestMismatch = errors.New("content does not match its digest or size")

func (v *verifyReader) Read(b []byte) (int, error) {
	if v.verifyErr != nil {
		return 0, v.verifyErr
	}
	if v.n >= v.desc.Size {
		// Only a source sending more than the descriptor says gets here
		// (a destination stops at the size).
		return 0, io.EOF
	}
	if rest := v.desc.Size - v.n; int64(len(b)) > rest {
		b = b[:rest]
	}
	n, err := v.r.Read(b)
	if v.h != nil {
		v.h.Write(b[:n])
	}
	v.n += int64(n)
	if err != nil && err != io.EOF {
		v.srcErr = err
		return n, err
	}
	if v.n == v.desc.Size {
		if v.h == nil {
			v.sent.Add(int64(n))
			return n, io.EOF
		}
		if got := digest.NewDigest(v.desc.Digest.Algorithm(), v.h); got != v.desc.Digest {
			v.verifyErr = fmt.Errorf("%w: got %s", ErrDigestMismatch, got)
			return 0, v.verifyErr
		}
		v.sent.Add(int64(n))
		return n, io.EOF
	}
	if err == io.EOF {
		v.verifyErr = fmt.Errorf("%w: the source sent %d of %d bytes", ErrDigestMismatch, v.n, v.desc.Size)
		return 0, v.verifyErr
	}
	v.sent.Add(int64(n))
	return n, nil
}
