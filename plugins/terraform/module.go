package terraform

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"

	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/plugins/terraform/tfmodule"
)

// Media types of a module artifact (package tfmodule, which agentd's
// "module push" links without the rest of this type).
const (
	ModuleArtifactType   = tfmodule.ArtifactType
	ModuleLayerMediaType = tfmodule.LayerMediaType
)

// PackModule is tfmodule.Pack.
func PackModule(dir string) ([]byte, error) { return tfmodule.Pack(dir) }

// PushModule is tfmodule.Push.
func PushModule(ctx context.Context, dir, registry, ref string, creds ocicopy.Credentials) (string, error) {
	return tfmodule.Push(ctx, dir, registry, ref, creds)
}

// maxModuleBytes bounds a module layer (compressed) and its unpacked
// files; a module is HCL, not data.
const maxModuleBytes = tfmodule.MaxBytes

// store is what a module is read from: an OCI image layout or a
// registry repository.
type store interface {
	content.Fetcher
	Resolve(ctx context.Context, reference string) (ocispec.Descriptor, error)
}

// layoutStore opens the OCI image layout dir, read only, refusing a
// directory that is none (oci.New would create one).
func layoutStore(ctx context.Context, dir string) (store, error) {
	if _, err := os.Stat(filepath.Join(dir, ocispec.ImageLayoutFile)); err != nil {
		return nil, fmt.Errorf("no OCI image layout at %s", dir)
	}
	return oci.NewFromFS(ctx, os.DirFS(dir))
}

// checkModuleRef checks the form of a module reference: "oci:DIR@sha256:HEX"
// or REPO@sha256:HEX. A tag (REPO:TAG, or REPO alone, which means
// latest) is refused: a tag can move under the install, and what an
// install runs must be what its config names (module_dir stays, for
// development).
func checkModuleRef(ref string) error {
	if rest, ok := strings.CutPrefix(ref, "oci:"); ok {
		dir, dg, ok := strings.Cut(rest, "@")
		if !ok || dir == "" {
			return fmt.Errorf("module %q: want oci:DIR@sha256:DIGEST", ref)
		}
		if _, err := digest.Parse(dg); err != nil {
			return fmt.Errorf("module %q: digest %q: %v", ref, dg, err)
		}
		return nil
	}
	r, err := tfmodule.ParseRef(ref)
	if err != nil {
		return err
	}
	if _, err := digest.Parse(r.Ref); err != nil {
		return fmt.Errorf("module %q: names the mutable tag %q; reference the module by digest, %s@sha256:HEX (`agentd module push DIR %s:%s` prints the digest it pushed; the same files always give the same digest), or use module_dir, a directory on the agent, for development", ref, r.Ref, r.Repo, r.Repo, r.Ref)
	}
	return nil
}

// openModule opens where module ref lives and returns it with the tag or
// digest to resolve there and a name for messages. ref is
// "oci:DIR@sha256:HEX" (a layout dir named outright) or
// REPO@sha256:HEX in the install registry at location registry
// (internal/ocicopy's syntax: oci:DIR, or a registry server, with creds).
func openModule(ctx context.Context, registry string, creds ocicopy.Credentials, ref string) (s store, tagOrDigest, where string, err error) {
	if err := checkModuleRef(ref); err != nil {
		return nil, "", "", err
	}
	if rest, ok := strings.CutPrefix(ref, "oci:"); ok {
		dir, dg, _ := strings.Cut(rest, "@")
		s, err := layoutStore(ctx, dir)
		return s, dg, dir, err
	}
	r, _ := tfmodule.ParseRef(ref)
	if registry == "" {
		return nil, "", "", fmt.Errorf("module %q: this agent has no install registry (agentd --install-registry, $%s)", ref, EnvInstallRegistry)
	}
	reg, err := ocicopy.ParseRegistry(registry)
	if err != nil {
		return nil, "", "", fmt.Errorf("install registry: %w", err)
	}
	if reg.IsLayout() {
		dir := filepath.Join(reg.LayoutRoot, filepath.FromSlash(r.Repo))
		s, err := layoutStore(ctx, dir)
		return s, r.Ref, dir, err
	}
	repo, err := ocicopy.Open(ctx, reg, r.Repo, creds)
	if err != nil {
		return nil, "", "", err
	}
	return repo, r.Ref, repo.Name(), nil
}

// fetchModule unpacks module ref into dst and returns the manifest's
// digest. The install registry's credentials, if any, are the
// operation's BYOC_INSTALL_REGISTRY_USERNAME, _PASSWORD or _TOKEN.
func fetchModule(ctx context.Context, registry string, opEnv map[string]string, ref, dst string) (string, error) {
	store, tagOrDigest, where, err := openModule(ctx, registry, ocicopy.CredentialsFromEnv(opEnv, EnvInstallRegistry), ref)
	if err != nil {
		return "", fmt.Errorf("module %q: %w", ref, err)
	}
	if c, ok := store.(interface{ Close() }); ok {
		defer c.Close()
	}
	desc, err := store.Resolve(ctx, tagOrDigest)
	if err != nil {
		return "", fmt.Errorf("module %q: resolve %s in %s: %w", ref, tagOrDigest, where, err)
	}
	mb, err := content.FetchAll(ctx, store, desc) // verifies size and digest
	if err != nil {
		return "", fmt.Errorf("module %q: manifest: %w", ref, err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		return "", fmt.Errorf("module %q: manifest %s: %w", ref, desc.Digest, err)
	}
	var layer *ocispec.Descriptor
	for i, l := range m.Layers {
		if l.MediaType == ModuleLayerMediaType {
			layer = &m.Layers[i]
		}
	}
	if layer == nil {
		return "", fmt.Errorf("module %q: manifest %s has no layer of media type %s (artifact type %q): not a terraform module", ref, desc.Digest, ModuleLayerMediaType, m.ArtifactType)
	}
	if layer.Size > maxModuleBytes {
		return "", fmt.Errorf("module %q: layer of %d bytes, over %d", ref, layer.Size, maxModuleBytes)
	}
	lb, err := content.FetchAll(ctx, store, *layer)
	if err != nil {
		return "", fmt.Errorf("module %q: layer: %w", ref, err)
	}
	if err := untarModule(lb, dst); err != nil {
		return "", fmt.Errorf("module %q: layer %s: %w", ref, layer.Digest, err)
	}
	return desc.Digest.String(), nil
}

// untarModule unpacks a gzipped tar of regular files and directories into
// dst. The whole layer is checked first (tfmodule.CheckLayer: links,
// devices, names leaving dst, .terraform/, override files, too many
// entries, too deep), so a refused layer writes nothing, whoever packed
// it; the unpacked bytes are bounded as they are written.
func untarModule(tgz []byte, dst string) error {
	if err := tfmodule.CheckLayer(tgz); err != nil {
		return err
	}
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(h.Name)
		if !fs.ValidPath(name) || name == "." && h.Typeflag != tar.TypeDir {
			return fmt.Errorf("entry %q: not a relative path inside the module", h.Name)
		}
		target := filepath.Join(dst, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			total += h.Size
			if total > maxModuleBytes {
				return fmt.Errorf("unpacked module over %d bytes", maxModuleBytes)
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, io.LimitReader(tr, h.Size))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q: type %q: only files and directories", h.Name, h.Typeflag)
		}
	}
}

// copyModuleDir copies a development module directory into dst: regular
// files and directories, leaving out .terraform and state files, which
// belong to a run, not to the module.
func copyModuleDir(src, dst string) error {
	st, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("module_dir: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("module_dir %s: not a directory", src)
	}
	err = tfmodule.Walk(src, func(rel string, d fs.DirEntry) error {
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		return fmt.Errorf("module_dir %s: %w", src, err)
	}
	return nil
}

// declaresVariable reports whether the root module in dir declares
// variable name in one of its .tf files.
func declaresVariable(dir, name string) bool {
	re := regexp.MustCompile(`(?m)^\s*variable\s+"` + regexp.QuoteMeta(name) + `"`)
	entries, _ := os.ReadDir(dir)
	return slices.ContainsFunc(entries, func(e fs.DirEntry) bool {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".tf") {
			return false
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		return err == nil && re.Match(b)
	})
}
