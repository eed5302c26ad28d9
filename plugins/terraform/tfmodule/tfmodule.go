// Package tfmodule packs a Terraform module directory as an OCI artifact
// and pushes it into an install registry (an OCI image layout root or a
// registry server, internal/ocicopy's locations). It is the part of the
// terraform type that agentd's "module push" needs, without the type
// itself, which links OPA for its policy gate and runs in the byoc-plugins
// companion, never in agentd's process.
package tfmodule

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"

	"github.com/byoc-dev/byoc/internal/ocicopy"
)

// Media types of a module artifact: an OCI manifest (image-spec 1.1) of
// artifact type ArtifactType whose one layer is the module
// directory as a gzipped tar.
const (
	ArtifactType   = "application/vnd.byoc.terraform.module.v1"
	LayerMediaType = "application/vnd.byoc.terraform.module.layer.v1.tar+gzip"
)

// Ref is a parsed module reference: REPO[:TAG|@DIGEST] (TAG defaults to
// latest).
type Ref struct {
	Repo, Ref string
}

var repoPattern = regexp.MustCompile(`^[a-z0-9]+([._/-][a-z0-9]+)*$`)

// ParseRef parses a module reference REPO[:TAG|@DIGEST].
func ParseRef(s string) (Ref, error) {
	repo, ref := s, "latest"
	if i := strings.Index(s, "@"); i >= 0 {
		repo, ref = s[:i], s[i+1:]
		if _, err := digest.Parse(ref); err != nil {
			return Ref{}, fmt.Errorf("module %q: digest %q: %v", s, ref, err)
		}
	} else if i := strings.LastIndex(s, ":"); i >= 0 {
		repo, ref = s[:i], s[i+1:]
	}
	if !repoPattern.MatchString(repo) || strings.Contains(repo, "..") {
		return Ref{}, fmt.Errorf("module %q: repository %q: want lowercase path segments such as modules/network", s, repo)
	}
	return Ref{Repo: repo, Ref: ref}, nil
}

// Walk calls fn for each directory and regular file of a module
// directory, in lexical order, by path relative to root; it skips
// .terraform and state files, and refuses a symbolic link or any other
// special file, naming it: a link's target lies outside what is packed
// (it could be any file of the machine), and leaving it out silently
// would pack a module that differs from the directory.
func Walk(root string, fn func(rel string, d fs.DirEntry) error) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		base := d.Name()
		if d.IsDir() && base == ".terraform" {
			return filepath.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(base, ".tfstate") || strings.HasSuffix(base, ".tfstate.backup") || base == ".terraform.tfstate.lock.info") {
			return nil
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			what := "a special file"
			if d.Type()&fs.ModeSymlink != 0 {
				what = "a symbolic link"
			}
			return fmt.Errorf("%s: %s; a module holds only regular files and directories (copy the file in)", p, what)
		}
		return fn(filepath.ToSlash(rel), d)
	})
}

// Pack returns a module directory as the gzipped tar of a module
// artifact's layer: its files and directories in lexical order, with
// fixed times and modes, so the same directory always gives the same
// bytes (and digest).
func Pack(dir string) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	err := Walk(dir, func(rel string, d fs.DirEntry) error {
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o755, Format: tar.FormatPAX})
		}
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o644, Size: int64(len(b)), Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Push packs the module directory dir and stores it as a module
// artifact in the install registry at location registry (internal/ocicopy's
// syntax: "oci:DIR", an OCI image layout root with one layout per
// repository, or a registry server; creds for a server that wants them),
// tagged ref's tag (REPO[:TAG], default latest). It returns the manifest's
// digest. The build agent does this for real installs; tests and the
// development setup (agentd module push) call it directly.
func Push(ctx context.Context, dir, registry, ref string, creds ocicopy.Credentials) (string, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return "", err
	}
	if strings.Contains(ref, "@") {
		return "", fmt.Errorf("module %q: push to a tag, not a digest", ref)
	}
	layer, err := Pack(dir)
	if err != nil {
		return "", fmt.Errorf("pack %s: %w", dir, err)
	}
	reg, err := ocicopy.ParseRegistry(registry)
	if err != nil {
		return "", err
	}
	repo, err := ocicopy.Open(ctx, reg, r.Repo, creds)
	if err != nil {
		return "", err
	}
	defer repo.Close()
	ld := content.NewDescriptorFromBytes(LayerMediaType, layer)
	if ok, err := repo.Exists(ctx, ld); err != nil {
		return "", err
	} else if !ok {
		if err := repo.Push(ctx, ld, bytes.NewReader(layer)); err != nil {
			return "", fmt.Errorf("push layer: %w", err)
		}
	}
	md, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, ArtifactType, oras.PackManifestOptions{
		Layers: []ocispec.Descriptor{ld},
		// A fixed creation time keeps the manifest's digest a function of
		// the module's files.
		ManifestAnnotations: map[string]string{ocispec.AnnotationCreated: "1970-01-01T00:00:00Z"},
	})
	if err != nil {
		return "", fmt.Errorf("pack manifest: %w", err)
	}
	if err := repo.Tag(ctx, md, r.Ref); err != nil {
		return "", err
	}
	return md.Digest.String(), nil
}
