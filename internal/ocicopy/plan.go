package ocicopy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
)

// Options tune a copy.
type Options struct {
	// Concurrency is how many blobs are copied at once (and how many
	// existence checks run at once); 0 means DefaultConcurrency.
	Concurrency int
	// NoReferrers leaves out the OCI 1.1 referrers (signatures, SBOMs:
	// manifests whose subject is a manifest of the graph). By default
	// they are copied with what they refer to.
	NoReferrers bool
	// RefuseImageReferrers refuses a graph whose referrers (or cosign
	// tags) carry a container filesystem layer: what travels beside an
	// artifact is then signatures, attestations and SBOMs, never an
	// image a cluster could pull by digest from the destination without
	// anyone having checked it (an install's copies set it: the
	// supply-chain policy checks the root only). The error names the
	// referrer and the layer.
	RefuseImageReferrers bool
	// CheckEveryBlob asks the destination about every blob, also those
	// under a manifest it holds, so a copy repairs content removed behind
	// a manifest's back (at a request per blob on every re-sync). By
	// default a held manifest vouches for its content.
	CheckEveryBlob bool
	// LocalVerify hashes every blob in this process while it streams, and
	// withholds the last bytes of one that does not match, on top of the
	// destination's own check. By default the destination's check is the
	// one: a registry verifies an upload against the digest it is pushed
	// under (the distribution spec's PUT ?digest=, refused with
	// DIGEST_INVALID) and an OCI layout store hashes what it ingests, so
	// hashing here too would hash every byte twice. Use it for a
	// destination that is known not to check.
	LocalVerify bool
	// Sent, if set, counts the blob bytes handed to the destination as
	// they go, for progress reports while a large blob streams.
	Sent *atomic.Int64
	// Progress, if set, is called when a blob or manifest starts and ends
	// being copied (from several goroutines at once).
	Progress func(Event)
}

// DefaultConcurrency is Options.Concurrency's default.
const DefaultConcurrency = 6

// Event is a step of an Apply.
type Event struct {
	Descriptor ocispec.Descriptor
	Manifest   bool
	// Done is false when the node starts, true when it is at the
	// destination.
	Done bool
}

// The limits of a graph, so that a hostile source registry cannot make a
// plan (which holds every manifest's bytes until the copy pushes them)
// exhaust the agent's memory. Each exceeded limit is a *LimitError.
const (
	// MaxManifestBytes bounds a manifest's size: larger ones are refused.
	MaxManifestBytes = 4 << 20
	// MaxPlanManifestBytes bounds the bytes of all the manifests of one
	// graph (referrers included) together.
	MaxPlanManifestBytes = 64 << 20
	// MaxGraphDepth bounds how deep manifests nest: the root is at depth
	// 1, what an index lists and a manifest's referrers one deeper.
	MaxGraphDepth = 16
	// MaxNodes bounds a graph's nodes (manifests and blobs, referrers
	// and their content included).
	MaxNodes = 100_000
)

// LimitError is a graph over one of the limits above.
type LimitError struct {
	// Ref is the repository and the root digest of the graph.
	Ref string
	// Limit names the limit: "MaxManifestBytes", "MaxPlanManifestBytes",
	// "MaxGraphDepth" or "MaxNodes".
	Limit string
	// Max is the limit's value.
	Max int64
	// What says what went over it.
	What string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s: %s, over the limit %s = %d", e.Ref, e.What, e.Limit, e.Max)
}

// Node is one piece of content of a graph.
type Node struct {
	Descriptor ocispec.Descriptor
	// Manifest: an image manifest, index or artifact manifest (the graph's
	// inner nodes); else a blob (config, layer).
	Manifest bool
	// Present: the destination holds it already.
	Present bool
	// raw is a manifest's bytes, read and verified during the plan.
	raw []byte
	// children are a manifest's successors (config, layers, platform
	// manifests, subject).
	children []digest.Digest
	// Tag is the cosign tag (CosignTag) the manifest was found by, which
	// the copy points at it in the destination too; Present means the
	// destination's tag names it.
	Tag string
}

// CosignTagSuffixes are the tags of cosign's layout a copy with
// referrers carries with its root: sha256-<hex> and one of these names
// the root's signatures (.sig), attestations (.att) and attached SBOM
// (.sbom) in cosign's tag layout (internal/cosignlayout writes byoc's).
// Registries without the OCI 1.1 referrers API serve them as tags.
var CosignTagSuffixes = []string{".sig", ".att", ".sbom"}

// CosignTag is cosign's tag for the manifest d with suffix.
func CosignTag(d digest.Digest, suffix string) string {
	return d.Algorithm().String() + "-" + d.Encoded() + suffix
}

// Plan is what a copy of one root would do.
type Plan struct {
	Src, Dst *Repo
	Root     ocispec.Descriptor
	// Nodes lists the graph children before parents: blobs and manifests
	// of the root (the root last among them), then each referrer with its
	// own content.
	Nodes []Node
	// TotalBytes is the size of all the graph's content; MissingBytes
	// what the destination lacks.
	TotalBytes, MissingBytes int64
}

// Missing lists the nodes the destination lacks, in Nodes' order.
func (p *Plan) Missing() []Node {
	var out []Node
	for _, n := range p.Nodes {
		if !n.Present {
			out = append(out, n)
		}
	}
	return out
}

// UpToDate reports whether the destination holds the whole graph.
func (p *Plan) UpToDate() bool { return p.MissingBytes == 0 && len(p.Missing()) == 0 }

// PlanCopy reads the graph of root from src, verifying every manifest,
// and asks dst which of its nodes it has. It changes nothing anywhere.
// An unreachable src or dst is an *UnreachableError of that side.
func PlanCopy(ctx context.Context, src, dst *Repo, root digest.Digest, opts Options) (*Plan, error) {
	nodes, rootDesc, err := walk(ctx, Source, src, root, !opts.NoReferrers, opts.RefuseImageReferrers)
	if err != nil {
		return nil, err
	}
	p := &Plan{Src: src, Dst: dst, Root: rootDesc, Nodes: nodes}
	check := checkPresentTopDown
	if opts.CheckEveryBlob {
		check = checkAll
	}
	if err := check(ctx, dst, p.Nodes, opts.concurrency()); err != nil {
		return nil, err
	}
	for _, n := range p.Nodes {
		p.TotalBytes += n.Descriptor.Size
		if !n.Present {
			p.MissingBytes += n.Descriptor.Size
		}
	}
	return p, nil
}

func (o Options) concurrency() int {
	if o.Concurrency <= 0 {
		return DefaultConcurrency
	}
	return o.Concurrency
}

// checkPresentTopDown sets each node's Present from dst, asking about
// the manifests first: the content of a manifest dst holds is taken to
// be there too, without asking (a registry refuses a manifest whose
// references it lacks, and Apply pushes a manifest only after its
// content), so an unchanged re-sync costs a request per manifest, not
// per blob. Options.CheckEveryBlob and Missing ask about every node.
func checkPresentTopDown(ctx context.Context, dst *Repo, nodes []Node, limit int) error {
	var manifests, rest []int
	for i, n := range nodes {
		if n.Manifest {
			manifests = append(manifests, i)
		}
	}
	if err := checkPresent(ctx, dst, nodes, manifests, limit); err != nil {
		return err
	}
	covered := map[digest.Digest]bool{}
	byDigest := map[digest.Digest]*Node{}
	for i := range nodes {
		byDigest[nodes[i].Descriptor.Digest] = &nodes[i]
	}
	var cover func(d digest.Digest)
	cover = func(d digest.Digest) {
		if covered[d] {
			return
		}
		covered[d] = true
		if n := byDigest[d]; n != nil {
			for _, c := range n.children {
				cover(c)
			}
		}
	}
	for _, i := range manifests {
		if nodes[i].Present {
			cover(nodes[i].Descriptor.Digest)
		}
	}
	for i, n := range nodes {
		if n.Manifest {
			continue
		}
		if covered[n.Descriptor.Digest] {
			nodes[i].Present = true
			continue
		}
		rest = append(rest, i)
	}
	return checkPresent(ctx, dst, nodes, rest, limit)
}

// checkAll sets every node's Present from dst.
func checkAll(ctx context.Context, dst *Repo, nodes []Node, limit int) error {
	all := make([]int, len(nodes))
	for i := range all {
		all[i] = i
	}
	return checkPresent(ctx, dst, nodes, all, limit)
}

// checkPresent sets the Present of nodes[i], i in which, from dst.
func checkPresent(ctx context.Context, dst *Repo, nodes []Node, which []int, limit int) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(limit * 2)
	for _, i := range which {
		g.Go(func() error {
			ok, err := dst.Exists(gctx, nodes[i].Descriptor)
			if err != nil {
				return sideError(Destination, dst, "check "+nodes[i].Descriptor.Digest.String()+" in", err)
			}
			if tag := nodes[i].Tag; ok && tag != "" {
				d, err := dst.Resolve(gctx, tag)
				if err != nil && !errors.Is(err, errdef.ErrNotFound) {
					return sideError(Destination, dst, "resolve "+tag+" in", err)
				}
				ok = err == nil && d.Digest == nodes[i].Descriptor.Digest
			}
			nodes[i].Present = ok
			return nil
		})
	}
	return g.Wait()
}

// Walk reads the graph of the manifest root in repo: every manifest
// (fetched, its size and digest verified, at most MaxManifestBytes) and
// the descriptors of every blob, children before parents; with
// referrers, then the manifests whose subject is in the graph, each with
// its own content, repeatedly. It returns the root's descriptor. Errors
// are the source side's (an *UnreachableError for an outage).
func Walk(ctx context.Context, repo *Repo, root digest.Digest, referrers bool) ([]Node, ocispec.Descriptor, error) {
	return walk(ctx, Source, repo, root, referrers, false)
}

// Missing walks the graph of root in repo as Walk does and lists the
// nodes repo lacks (a manifest it lacks is an error, since its children
// cannot be told). Errors are the destination side's.
func Missing(ctx context.Context, repo *Repo, root digest.Digest, referrers bool) ([]Node, error) {
	nodes, _, err := walk(ctx, Destination, repo, root, referrers, false)
	if err != nil {
		return nil, err
	}
	if err := checkAll(ctx, repo, nodes, DefaultConcurrency); err != nil {
		return nil, err
	}
	var out []Node
	for _, n := range nodes {
		if !n.Present {
			out = append(out, n)
		}
	}
	return out, nil
}

func walk(ctx context.Context, side Side, repo *Repo, root digest.Digest, referrers, refuseImages bool) ([]Node, ocispec.Descriptor, error) {
	if err := root.Validate(); err != nil {
		return nil, ocispec.Descriptor{}, fmt.Errorf("digest %q: %w", root, err)
	}
	rootDesc, err := repo.Resolve(ctx, root.String())
	if err != nil {
		return nil, ocispec.Descriptor{}, sideError(side, repo, "resolve "+root.String()+" in", err)
	}
	if rootDesc.Digest != root {
		return nil, ocispec.Descriptor{}, fmt.Errorf("resolve %s in %s: the registry answered %s", root, repo.Name(), rootDesc.Digest)
	}
	w := &walker{side: side, repo: repo, ref: repo.Name() + "@" + root.String(), seen: map[digest.Digest]bool{}, depth: map[digest.Digest]int{},
		refuseImages: refuseImages}
	if err := w.visit(ctx, rootDesc, 1, ""); err != nil {
		return nil, ocispec.Descriptor{}, err
	}
	if referrers {
		// The root's cosign tags, each with its content.
		for _, suffix := range CosignTagSuffixes {
			tag := CosignTag(root, suffix)
			d, err := repo.Resolve(ctx, tag)
			if errors.Is(err, errdef.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, ocispec.Descriptor{}, sideError(side, repo, "resolve "+tag+" in", err)
			}
			if !isManifest(d.MediaType) {
				return nil, ocispec.Descriptor{}, fmt.Errorf("%s: tag %s names a %s, not a manifest", repo.Name(), tag, d.MediaType)
			}
			if err := w.visit(ctx, d, 2, "tag "+tag); err != nil {
				return nil, ocispec.Descriptor{}, err
			}
			for i := range w.nodes {
				if w.nodes[i].Descriptor.Digest == d.Digest {
					w.nodes[i].Tag = tag
				}
			}
		}
		// Each manifest of the graph, including referrers found on the
		// way, is asked for its referrers once.
		for i := 0; i < len(w.nodes); i++ {
			n := w.nodes[i]
			if !n.Manifest {
				continue
			}
			refs, err := repo.referrers(ctx, n.Descriptor, MaxNodes-len(w.seen))
			var tooMany *tooManyReferrers
			if errors.As(err, &tooMany) {
				return nil, ocispec.Descriptor{}, &LimitError{Ref: w.ref, Limit: "MaxNodes", Max: MaxNodes,
					What: fmt.Sprintf("the graph has %d nodes and %s lists more referrers than that leaves", len(w.seen), n.Descriptor.Digest)}
			}
			if err != nil {
				return nil, ocispec.Descriptor{}, sideError(side, repo, "list referrers of "+n.Descriptor.Digest.String()+" in", err)
			}
			for _, r := range refs {
				if err := w.visit(ctx, r, w.depth[n.Descriptor.Digest]+1, "referrer "+r.Digest.String()+" of "+n.Descriptor.Digest.String()); err != nil {
					return nil, ocispec.Descriptor{}, err
				}
			}
		}
	}
	return w.nodes, rootDesc, nil
}

type walker struct {
	side Side
	repo *Repo
	// ref names the graph in errors: the repository and the root.
	ref  string
	seen map[digest.Digest]bool
	// depth is each manifest's depth (the root's is 1).
	depth map[digest.Digest]int
	// manifestBytes is the size of the manifests held so far.
	manifestBytes int64
	nodes         []Node
	// refuseImages refuses a filesystem layer under a referrer or a
	// cosign tag (Options.RefuseImageReferrers).
	refuseImages bool
}

// visit appends desc's graph in post-order (children first); desc is at
// depth (the root at 1). via names the referrer or cosign tag desc is
// reached through ("": the artifact's own graph).
func (w *walker) visit(ctx context.Context, desc ocispec.Descriptor, depth int, via string) error {
	if via != "" && w.refuseImages && filesystemLayer(desc.MediaType) {
		return fmt.Errorf("%s: %s carries the container filesystem layer %s (%s): only signatures, attestations and SBOMs travel beside an artifact, never an image nobody checked",
			w.ref, via, desc.Digest, desc.MediaType)
	}
	if w.seen[desc.Digest] {
		return nil
	}
	w.seen[desc.Digest] = true
	if len(w.seen) > MaxNodes {
		return &LimitError{Ref: w.ref, Limit: "MaxNodes", Max: MaxNodes, What: fmt.Sprintf("the graph has more nodes (at %s)", desc.Digest)}
	}
	if err := desc.Digest.Validate(); err != nil {
		return fmt.Errorf("%s: descriptor digest %q: %w", w.repo.Name(), desc.Digest, err)
	}
	if desc.Size < 0 {
		return fmt.Errorf("%s: descriptor %s has size %d", w.repo.Name(), desc.Digest, desc.Size)
	}
	if !isManifest(desc.MediaType) {
		w.nodes = append(w.nodes, Node{Descriptor: desc})
		return nil
	}
	if depth > MaxGraphDepth {
		return &LimitError{Ref: w.ref, Limit: "MaxGraphDepth", Max: MaxGraphDepth,
			What: fmt.Sprintf("manifest %s is at depth %d", desc.Digest, depth)}
	}
	if desc.Size > MaxManifestBytes {
		return &LimitError{Ref: w.ref, Limit: "MaxManifestBytes", Max: MaxManifestBytes,
			What: fmt.Sprintf("manifest %s is %d bytes", desc.Digest, desc.Size)}
	}
	// Counted before the fetch, from the descriptor (fetchManifest
	// refuses content of another size), so the bytes over the limit are
	// never read.
	if w.manifestBytes+desc.Size > MaxPlanManifestBytes {
		return &LimitError{Ref: w.ref, Limit: "MaxPlanManifestBytes", Max: MaxPlanManifestBytes,
			What: fmt.Sprintf("the manifests come to %d bytes with %s", w.manifestBytes+desc.Size, desc.Digest)}
	}
	w.manifestBytes += desc.Size
	w.depth[desc.Digest] = depth
	raw, err := fetchManifest(ctx, w.side, w.repo, desc)
	if err != nil {
		return err
	}
	succ, err := content.Successors(ctx, oneFetcher{desc, raw}, desc)
	if err != nil {
		return fmt.Errorf("%s: manifest %s: %w", w.repo.Name(), desc.Digest, err)
	}
	var children []digest.Digest
	for _, s := range succ {
		if foreign(s.MediaType) && (via == "" || !w.refuseImages) {
			continue
		}
		children = append(children, s.Digest)
		if err := w.visit(ctx, s, depth+1, via); err != nil {
			return err
		}
	}
	w.nodes = append(w.nodes, Node{Descriptor: desc, Manifest: true, raw: raw, children: children})
	return nil
}

// fetchManifest reads a manifest and checks its size and digest.
// The caller has checked desc.Size against the limits.
func fetchManifest(ctx context.Context, side Side, repo *Repo, desc ocispec.Descriptor) ([]byte, error) {
	rc, err := repo.Fetch(ctx, desc)
	if err != nil {
		return nil, sideError(side, repo, "fetch manifest "+desc.Digest.String()+" from", err)
	}
	defer rc.Close()
	raw, err := io.ReadAll(io.LimitReader(rc, desc.Size+1))
	if err != nil {
		return nil, sideError(side, repo, "read manifest "+desc.Digest.String()+" from", err)
	}
	if int64(len(raw)) != desc.Size {
		return nil, fmt.Errorf("%s: manifest %s: got %d bytes, its descriptor says %d", repo.Name(), desc.Digest, len(raw), desc.Size)
	}
	if got := desc.Digest.Algorithm().FromBytes(raw); got != desc.Digest {
		return nil, fmt.Errorf("%s: manifest %s: its content has digest %s", repo.Name(), desc.Digest, got)
	}
	return raw, nil
}

// oneFetcher serves one manifest's bytes to content.Successors.
type oneFetcher struct {
	desc ocispec.Descriptor
	raw  []byte
}

func (f oneFetcher) Fetch(_ context.Context, d ocispec.Descriptor) (io.ReadCloser, error) {
	if d.Digest != f.desc.Digest {
		return nil, errors.New("only the manifest itself can be read here")
	}
	return io.NopCloser(bytes.NewReader(f.raw)), nil
}

// isManifest reports whether a media type is a manifest's (an inner node).
func isManifest(mt string) bool {
	switch mt {
	case ocispec.MediaTypeImageManifest, ocispec.MediaTypeImageIndex,
		"application/vnd.oci.artifact.manifest.v1+json",
		"application/vnd.docker.distribution.manifest.v2+json",
		"application/vnd.docker.distribution.manifest.list.v2+json":
		return true
	}
	return false
}

// filesystemLayer reports a container filesystem layer's media type
// (OCI's, Docker's, the non-distributable ones included): what a
// container runtime unpacks.
func filesystemLayer(mt string) bool {
	return strings.HasPrefix(mt, "application/vnd.oci.image.layer.") || strings.HasPrefix(mt, "application/vnd.docker.image.rootfs.")
}

// foreign reports a non-distributable layer (Windows base layers), which
// registries refuse to take and copies leave out.
func foreign(mt string) bool {
	switch mt {
	case "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
		// The OCI non-distributable layer types (deprecated, still met).
		"application/vnd.oci.image.layer.nondistributable.v1.tar",
		"application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
		"application/vnd.oci.image.layer.nondistributable.v1.tar+zstd":
		return true
	}
	return false
}
