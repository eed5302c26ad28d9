package ocicopy

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// Credentials authenticate to a registry. Username and Password are sent
// as Basic auth, or exchanged at the registry's token realm when it asks
// for a bearer token (the Docker token flow); AccessToken is a bearer
// token sent as is; RefreshToken is exchanged at the token realm.
// AzureToken (an Entra access token, of AzureTenant) is exchanged at an
// Azure Container Registry for its refresh token first (cloudauth.go);
// it wins over the others. All empty: anonymous.
type Credentials struct {
	Username, Password, AccessToken, RefreshToken string
	AzureToken, AzureTenant                       string
}

// CredentialsFromEnv reads PREFIX_USERNAME, PREFIX_PASSWORD, PREFIX_TOKEN
// (an access token), PREFIX_AZURE_TOKEN and PREFIX_AZURE_TENANT from env.
func CredentialsFromEnv(env map[string]string, prefix string) Credentials {
	return Credentials{Username: env[prefix+"_USERNAME"], Password: env[prefix+"_PASSWORD"], AccessToken: env[prefix+"_TOKEN"],
		AzureToken: env[prefix+EnvAzureToken], AzureTenant: env[prefix+EnvAzureTenant]}
}

// Repo is one repository, in a registry or an OCI image layout
// directory, opened for copying. It is an oras GraphTarget, so content can
// also be read from it directly (Fetch by descriptor, Resolve by digest).
type Repo struct {
	name string
	reg  Registry
	// dir is a layout repository's directory.
	dir    string
	remote *remote.Repository
	// transport is a registry repository's connection pool.
	transport *http.Transport

	// mu guards layout, which is nil until the layout directory exists:
	// reading a repository never creates it, the first push does.
	mu     sync.Mutex
	layout *oci.Store
	// imu guards index, a layout's index.json as byoc writes it
	// (layoutindex.go); it is taken after mu, never before.
	imu   sync.Mutex
	index *ocispec.Index

	// blobs serves a layout repository's blobs that are not files of
	// its directory (ServeBlobs).
	blobs func(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error)
}

// ServeBlobs makes a layout repository read blobs from fetch before its
// own files: fetch returns an error wrapping errdef.ErrNotFound for a
// blob it does not serve (the layout's file is read then). An offline
// bundle serves its large blobs so, from their byte ranges in the tar
// (internal/bundlefile), rather than unpacking them first. It must be
// called before the repository is used; it does nothing to a registry.
func (r *Repo) ServeBlobs(fetch func(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error)) {
	if r.remote == nil {
		r.blobs = fetch
	}
}

// target is what both kinds of repository offer.
type target interface {
	content.Storage
	Resolve(ctx context.Context, reference string) (ocispec.Descriptor, error)
	Tag(ctx context.Context, desc ocispec.Descriptor, reference string) error
}

// target returns the repository's store; for a layout that does not
// exist yet, nil unless create.
func (r *Repo) target(ctx context.Context, create bool) (target, error) {
	if r.remote != nil {
		return r.remote, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.layout != nil {
		return r.layout, nil
	}
	if _, err := os.Stat(filepath.Join(r.dir, ocispec.ImageLayoutFile)); err != nil && !create {
		return nil, nil
	}
	// byoc writes the layout's own files (layoutindex.go), before the
	// store would, and after it each change to the index.
	idx, err := prepareLayout(r.dir)
	if err != nil {
		return nil, fmt.Errorf("open OCI layout %s: %w", r.dir, err)
	}
	st, err := oci.NewWithContext(ctx, r.dir)
	if err != nil {
		return nil, fmt.Errorf("open OCI layout %s: %w", r.dir, err)
	}
	st.AutoSaveIndex = false
	r.layout, r.index = st, idx
	return st, nil
}

// saveIndexed records in a layout's index.json that desc was pushed or
// tagged ref (layoutindex.go); a registry's needs nothing.
func (r *Repo) saveIndexed(desc ocispec.Descriptor, ref string) error {
	if r.remote != nil || (ref == "" && !isManifest(desc.MediaType)) {
		return nil
	}
	r.imu.Lock()
	defer r.imu.Unlock()
	if r.index == nil || !indexed(r.index, desc, ref) {
		return nil
	}
	return writeIndex(r.dir, r.index)
}

// Name is the repository as a reference names it (without digest).
func (r *Repo) Name() string { return r.name }

// Registry is where the repository lives.
func (r *Repo) Registry() Registry { return r.reg }

// Fetch reads the content desc describes. It does not verify the digest;
// use content.ReadAll or a verifying reader.
func (r *Repo) Fetch(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error) {
	if r.blobs != nil {
		rc, err := r.blobs(ctx, desc)
		if !errors.Is(err, errdef.ErrNotFound) {
			return rc, err
		}
	}
	t, err := r.target(ctx, false)
	if err != nil || t == nil {
		return nil, cmp.Or(err, fmt.Errorf("%s: %w", desc.Digest, errdef.ErrNotFound))
	}
	return t.Fetch(ctx, desc)
}

// Push stores content under desc (creating a layout repository's
// directory first).
func (r *Repo) Push(ctx context.Context, desc ocispec.Descriptor, rd io.Reader) error {
	t, err := r.target(ctx, true)
	if err != nil {
		return err
	}
	if err := t.Push(ctx, desc, rd); err != nil {
		return err
	}
	return r.saveIndexed(desc, "")
}

// Exists reports whether the repository holds desc.
func (r *Repo) Exists(ctx context.Context, desc ocispec.Descriptor) (bool, error) {
	t, err := r.target(ctx, false)
	if err != nil || t == nil {
		return false, err
	}
	return t.Exists(ctx, desc)
}

// Tag points reference at desc.
func (r *Repo) Tag(ctx context.Context, desc ocispec.Descriptor, reference string) error {
	t, err := r.target(ctx, true)
	if err != nil {
		return err
	}
	if err := t.Tag(ctx, desc, reference); err != nil {
		return err
	}
	return r.saveIndexed(desc, reference)
}

// Resolve finds the descriptor of a manifest by digest (or tag). In a
// layout, a manifest that index.json does not list (a platform manifest
// of an index) is found by reading its blob.
func (r *Repo) Resolve(ctx context.Context, reference string) (ocispec.Descriptor, error) {
	t, err := r.target(ctx, false)
	if err != nil || t == nil {
		return ocispec.Descriptor{}, cmp.Or(err, fmt.Errorf("%s: %w", reference, errdef.ErrNotFound))
	}
	desc, err := t.Resolve(ctx, reference)
	if err == nil || r.remote != nil || !errors.Is(err, errdef.ErrNotFound) {
		return desc, err
	}
	d, perr := digest.Parse(reference)
	if perr != nil {
		return desc, err
	}
	b, rerr := os.ReadFile(r.blobPath(d))
	if rerr != nil {
		return desc, err
	}
	if digest.FromBytes(b) != d {
		return ocispec.Descriptor{}, fmt.Errorf("%s: blob %s does not match its digest", r.name, d)
	}
	var m struct {
		MediaType string `json:"mediaType"`
	}
	if json.Unmarshal(b, &m) != nil || m.MediaType == "" {
		return ocispec.Descriptor{}, fmt.Errorf("%s: %s is not a manifest with a mediaType", r.name, d)
	}
	return ocispec.Descriptor{MediaType: m.MediaType, Digest: d, Size: int64(len(b))}, nil
}

func (r *Repo) blobPath(d digest.Digest) string {
	return filepath.Join(r.dir, "blobs", d.Algorithm().String(), d.Encoded())
}

// tooManyReferrers is a referrers list longer than asked for.
type tooManyReferrers struct{}

func (*tooManyReferrers) Error() string { return "too many referrers" }

// referrers lists the manifests whose subject is desc (a layout knows
// them; for a registry, the referrers API or its tag schema): at most
// max, else a *tooManyReferrers (a registry's pages are read no further).
func (r *Repo) referrers(ctx context.Context, desc ocispec.Descriptor, max int) ([]ocispec.Descriptor, error) {
	if r.remote == nil {
		t, err := r.target(ctx, false)
		if err != nil || t == nil {
			return nil, err
		}
		out, err := registry.Referrers(ctx, t.(*oci.Store), desc, "")
		if err == nil && len(out) > max {
			return nil, &tooManyReferrers{}
		}
		return out, err
	}
	var out []ocispec.Descriptor
	err := r.remote.Referrers(ctx, desc, "", func(refs []ocispec.Descriptor) error {
		out = append(out, refs...)
		if len(out) > max {
			return &tooManyReferrers{}
		}
		return nil
	})
	return out, err
}

// Open opens repository in reg. An existing layout repository's index is
// read; a missing one is created by the first push, not before (a plan or
// a failed copy leaves no trace). A registry is not contacted until the
// first request.
func Open(ctx context.Context, reg Registry, repository string, creds Credentials) (*Repo, error) {
	if !ValidRepository(repository) {
		return nil, fmt.Errorf("repository %q is not valid (lowercase letters, digits, separators . _ - /)", repository)
	}
	if reg.IsLayout() {
		return openLayout(ctx, reg, reg.repoPath(repository))
	}
	full := reg.repoPath(repository)
	tr := newTransport()
	rr := &remote.Repository{
		Reference: registry.Reference{Registry: reg.Host, Repository: full},
		PlainHTTP: reg.PlainHTTP,
		Client:    authClient(reg, creds, &http.Client{Transport: tr}),
		// The referrers tag schema's old index is left in place rather
		// than deleted: registries without deletion refuse the delete.
		SkipReferrersGC: true,
	}
	return &Repo{name: reg.Host + "/" + full, reg: reg, remote: rr, transport: tr}, nil
}

// OpenLayout opens the OCI image layout directory dir as a repository,
// whatever its name: a tool that writes a layout of its own (the helm
// type's PushChart) writes it as Open's repositories are written, its
// index.json whole or not at all (layoutindex.go). The directory is
// created by the first push.
func OpenLayout(ctx context.Context, dir string) (*Repo, error) {
	dir = filepath.Clean(dir)
	return openLayout(ctx, Registry{LayoutRoot: filepath.Dir(dir)}, dir)
}

func openLayout(ctx context.Context, reg Registry, dir string) (*Repo, error) {
	r := &Repo{name: "oci:" + dir, reg: reg, dir: dir}
	// An existing layout is read now, so that a broken one is
	// reported at once; a missing one is created by the first push.
	if _, err := r.target(ctx, false); err != nil {
		return nil, err
	}
	return r, nil
}

// authClient is the auth.Client of reg with creds: static credentials,
// or an Azure token exchanged at the registry (cloudauth.go).
func authClient(reg Registry, creds Credentials, hc *http.Client) *auth.Client {
	cred := auth.StaticCredential(reg.Host, auth.Credential{Username: creds.Username, Password: creds.Password, RefreshToken: creds.RefreshToken, AccessToken: creds.AccessToken})
	if creds.AzureToken != "" {
		cred = acrCredential(hc, reg, creds.AzureTenant, creds.AzureToken)
	}
	return &auth.Client{
		Client:     hc,
		Cache:      auth.NewCache(),
		Credential: cred,
		Header:     http.Header{"User-Agent": {"byoc-ocicopy"}},
	}
}

// Close closes the repository's idle connections. A Repo stays usable.
func (r *Repo) Close() {
	if r.transport != nil {
		r.transport.CloseIdleConnections()
	}
}

// newTransport is a repository's connection pool. Larger socket buffers
// than net/http's 4 KiB default cut system calls per blob.
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: 2 * time.Minute,
		WriteBufferSize:       256 << 10,
		ReadBufferSize:        256 << 10,
	}
}

// Referrers lists the manifests whose subject is desc (OCI 1.1: the
// referrers API, or its tag schema, or a layout's own record): at most
// max, else an error saying there are more.
func (r *Repo) Referrers(ctx context.Context, desc ocispec.Descriptor, max int) ([]ocispec.Descriptor, error) {
	out, err := r.referrers(ctx, desc, max)
	var tm *tooManyReferrers
	if errors.As(err, &tm) {
		return nil, fmt.Errorf("%s: %s has more than %d referrers", r.name, desc.Digest, max)
	}
	return out, err
}
