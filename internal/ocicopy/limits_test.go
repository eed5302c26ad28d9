package ocicopy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
)

// hostileRegistry is a source registry serving whatever graph a test
// puts in it (manifests only: a walk fetches no blob), as a hostile one
// would: indexes of indexes without end, referrers of referrers, many
// large manifests, manifests of many layers. It counts the manifest
// bytes it served.
type hostileRegistry struct {
	mu        sync.Mutex
	manifests map[digest.Digest]manifest
	referrers map[digest.Digest][]ocispec.Descriptor
	served    atomic.Int64
	srv       *httptest.Server
}

type manifest struct {
	mediaType string
	raw       []byte
}

func startHostile(t *testing.T) *hostileRegistry {
	h := &hostileRegistry{manifests: map[digest.Digest]manifest{}, referrers: map[digest.Digest][]ocispec.Descriptor{}}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hostileRegistry) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v2/" {
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v2/hostile/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	kind, ref, _ := strings.Cut(rest, "/")
	h.mu.Lock()
	defer h.mu.Unlock()
	switch kind {
	case "manifests":
		m, ok := h.manifests[digest.Digest(ref)]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"unknown"}]}`)
			return
		}
		w.Header().Set("Content-Type", m.mediaType)
		w.Header().Set("Docker-Content-Digest", ref)
		w.Header().Set("Content-Length", fmt.Sprint(len(m.raw)))
		if r.Method == http.MethodGet {
			h.served.Add(int64(len(m.raw)))
			w.Write(m.raw)
		}
	case "referrers":
		// Pages of 1,000, each linking to the next.
		refs := h.referrers[digest.Digest(ref)]
		var page int
		fmt.Sscan(r.URL.Query().Get("page"), &page)
		refs = refs[min(page*1000, len(refs)):min((page+1)*1000, len(refs))]
		if (page+1)*1000 < len(h.referrers[digest.Digest(ref)]) {
			w.Header().Set("Link", fmt.Sprintf(`<%s?page=%d>; rel="next"`, r.URL.Path, page+1))
		}
		w.Header().Set("Content-Type", ocispec.MediaTypeImageIndex)
		json.NewEncoder(w).Encode(ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex, Manifests: refs})
	default:
		http.NotFound(w, r)
	}
}

// put stores v as a manifest and returns its descriptor.
func (h *hostileRegistry) put(t *testing.T, mediaType string, v any) ocispec.Descriptor {
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	d := digest.FromBytes(raw)
	h.mu.Lock()
	h.manifests[d] = manifest{mediaType, raw}
	h.mu.Unlock()
	return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(raw))}
}

func (h *hostileRegistry) index(t *testing.T, ms ...ocispec.Descriptor) ocispec.Descriptor {
	if ms == nil {
		ms = []ocispec.Descriptor{}
	}
	return h.put(t, ocispec.MediaTypeImageIndex, ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex, Manifests: ms})
}

// image stores an image manifest of the given layers, with an
// annotation of pad bytes, and optionally a subject.
func (h *hostileRegistry) image(t *testing.T, seed int, layers []ocispec.Descriptor, pad int, subject *ocispec.Descriptor) ocispec.Descriptor {
	cfg := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromString(fmt.Sprint("config ", seed)), Size: 2}
	if layers == nil {
		layers = []ocispec.Descriptor{}
	}
	m := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest, Config: cfg, Layers: layers, Subject: subject,
		Annotations: map[string]string{"pad": strings.Repeat("x", pad)}}
	return h.put(t, ocispec.MediaTypeImageManifest, m)
}

func (h *hostileRegistry) open(t *testing.T) *ocicopy.Repo {
	return open(t, h.srv.Listener.Addr().String(), "hostile", ocicopy.Credentials{})
}

// wantLimit checks that err is a *LimitError of limit, naming ref.
func wantLimit(t *testing.T, err error, limit string, ref string) {
	t.Helper()
	var le *ocicopy.LimitError
	if !errors.As(err, &le) {
		t.Fatalf("got %v, want a *ocicopy.LimitError of %s", err, limit)
	}
	if le.Limit != limit || !strings.Contains(err.Error(), ref) || !strings.Contains(err.Error(), limit) {
		t.Fatalf("got %q (limit %s), want the limit %s and the reference %s named", err, le.Limit, limit, ref)
	}
	t.Logf("refused: %v", err)
}

// chain stores n indexes, each listing the next (the last empty), and
// returns the first.
func (h *hostileRegistry) chain(t *testing.T, n int) ocispec.Descriptor {
	d := h.index(t)
	for i := 1; i < n; i++ {
		d = h.index(t, d)
	}
	return d
}

func TestGraphDepthLimit(t *testing.T) {
	ctx := context.Background()
	h := startHostile(t)
	src := h.open(t)

	ok := h.chain(t, ocicopy.MaxGraphDepth)
	if nodes, _, err := ocicopy.Walk(ctx, src, ok.Digest, true); err != nil || len(nodes) != ocicopy.MaxGraphDepth {
		t.Fatalf("a chain of %d indexes: %d nodes, %v; want it walked", ocicopy.MaxGraphDepth, len(nodes), err)
	}
	deep := h.chain(t, ocicopy.MaxGraphDepth+1)
	_, _, err := ocicopy.Walk(ctx, src, deep.Digest, true)
	wantLimit(t, err, "MaxGraphDepth", src.Name()+"@"+deep.Digest.String())

	// Referrers of referrers nest too: an image with a signature, whose
	// signature has a signature, and so on.
	root := h.image(t, 0, nil, 0, nil)
	subject := root
	for i := 1; i <= ocicopy.MaxGraphDepth; i++ {
		s := subject
		sig := h.image(t, i, nil, 0, &s)
		h.referrers[s.Digest] = []ocispec.Descriptor{sig}
		subject = sig
	}
	_, _, err = ocicopy.Walk(ctx, src, root.Digest, true)
	wantLimit(t, err, "MaxGraphDepth", src.Name()+"@"+root.Digest.String())
	// Without referrers, the image alone is walked.
	if _, _, err := ocicopy.Walk(ctx, src, root.Digest, false); err != nil {
		t.Fatal(err)
	}
}

func TestPlanManifestBytesLimit(t *testing.T) {
	ctx := context.Background()
	h := startHostile(t)
	src := h.open(t)

	// Manifests just under MaxManifestBytes each, more of them than
	// MaxPlanManifestBytes holds.
	const pad = ocicopy.MaxManifestBytes - 1024
	n := ocicopy.MaxPlanManifestBytes/pad + 2
	var ms []ocispec.Descriptor
	for i := range n {
		ms = append(ms, h.image(t, i, nil, pad, nil))
	}
	root := h.index(t, ms...)
	dst := open(t, "oci:"+t.TempDir(), "dst", ocicopy.Credentials{})
	_, err := ocicopy.PlanCopy(ctx, src, dst, root.Digest, ocicopy.Options{})
	wantLimit(t, err, "MaxPlanManifestBytes", src.Name()+"@"+root.Digest.String())
	if got := h.served.Load(); got > ocicopy.MaxPlanManifestBytes {
		t.Fatalf("the registry served %d manifest bytes, over MaxPlanManifestBytes %d", got, ocicopy.MaxPlanManifestBytes)
	}

	// One manifest over MaxManifestBytes is refused before it is read.
	h.served.Store(0)
	big := h.image(t, -1, nil, ocicopy.MaxManifestBytes, nil)
	_, _, err = ocicopy.Walk(ctx, src, h.index(t, big).Digest, false)
	wantLimit(t, err, "MaxManifestBytes", big.Digest.String())
	if got := h.served.Load(); got > 1024 {
		t.Fatalf("the registry served %d bytes for a manifest over the limit", got)
	}
}

func TestGraphNodesLimit(t *testing.T) {
	ctx := context.Background()
	h := startHostile(t)
	src := h.open(t)

	// Four images of 25,001 distinct layers each (about 3.4 MB of
	// manifest each), over MaxNodes together.
	const perImage = ocicopy.MaxNodes/4 + 1
	var ms []ocispec.Descriptor
	for i := range 4 {
		layers := make([]ocispec.Descriptor, perImage)
		for j := range layers {
			layers[j] = ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromString(fmt.Sprint(i, " ", j)), Size: 1}
		}
		ms = append(ms, h.image(t, i, layers, 0, nil))
	}
	root := h.index(t, ms...)
	_, _, err := ocicopy.Walk(ctx, src, root.Digest, false)
	wantLimit(t, err, "MaxNodes", src.Name()+"@"+root.Digest.String())

	// A manifest with more referrers than the graph has room for.
	img := h.image(t, 9, nil, 0, nil)
	refs := make([]ocispec.Descriptor, ocicopy.MaxNodes)
	for j := range refs {
		refs[j] = ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString(fmt.Sprint("ref ", j)), Size: 100}
	}
	h.referrers[img.Digest] = refs
	h.served.Store(0)
	_, _, err = ocicopy.Walk(ctx, src, img.Digest, true)
	wantLimit(t, err, "MaxNodes", src.Name()+"@"+img.Digest.String())
	if got := h.served.Load(); got != img.Size {
		t.Fatalf("the walk fetched %d manifest bytes, want only the image's %d", got, img.Size)
	}
}

// TestGraphDepthLimitRealRegistry pushes indexes of indexes to a real
// registry (distribution), one deeper than MaxGraphDepth.
func TestGraphDepthLimitRealRegistry(t *testing.T) {
	ctx := context.Background()
	reg := ocitest.StartRegistry(t, ocitest.RegistryOptions{Username: srcCreds.Username, Password: srcCreds.Password})
	src := open(t, reg.URL(), "acme/deep", srcCreds)
	d, err := ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 90, Layers: []int64{1024}})
	if err != nil {
		t.Fatal(err)
	}
	for range ocicopy.MaxGraphDepth {
		if d, err = ocitest.Index(ctx, src, d); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err = ocicopy.Walk(ctx, src, d.Digest, true)
	wantLimit(t, err, "MaxGraphDepth", src.Name()+"@"+d.Digest.String())
}
