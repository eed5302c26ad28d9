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
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
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

// The limits of a module's files, kept by Pack, by the terraform type's
// copy of a development module_dir and by its unpacking of a module
// layer (which refuses the layer whoever packed it).
const (
	// MaxBytes bounds a module layer (compressed) and its unpacked files;
	// a module is HCL, not data.
	MaxBytes = 64 << 20
	// MaxEntries bounds a module's files and directories together.
	MaxEntries = 10_000
	// MaxDepth bounds how many names deep an entry is ("a/b/c.tf" is 3).
	MaxDepth = 32
)

// Checker checks the entries of one module, in order, against what a
// module may hold and the limits above.
type Checker struct {
	entries int
}

// Check checks the entry rel (a clean slash path relative to the module,
// a file or a directory). It refuses:
//   - anything under .terraform/ (Terraform's working directory: a
//     pre-seeded .terraform/providers would be run instead of the agent's
//     provider mirror) or terraform.d/ (an implied provider directory);
//   - override files (override.tf, NAME_override.tf and their .tf.json
//     forms): Terraform merges them over the module's other files after
//     them, so they change what the customer reviewed the module to do,
//     and could replace the backend the agent sets;
//   - the MaxEntries+1st entry and an entry deeper than MaxDepth.
//
// The dependency lock file (.terraform.lock.hcl) is allowed: providers
// come only from the agent's mirror (the type's CLI config), and a lock
// file only narrows which of the mirror's packages init accepts.
func (c *Checker) Check(rel string) error {
	c.entries++
	if c.entries > MaxEntries {
		return fmt.Errorf("entry %q: the module has more than %d entries (files and directories), the limit", rel, MaxEntries)
	}
	parts := strings.Split(rel, "/")
	if len(parts) > MaxDepth {
		return fmt.Errorf("entry %q: %d names deep, over the limit of %d", rel, len(parts), MaxDepth)
	}
	for _, p := range parts {
		switch p {
		case ".terraform":
			return fmt.Errorf("entry %q: .terraform/ is Terraform's working directory, which the agent makes (its providers come only from the agent's mirror); leave it out of the module", rel)
		case "terraform.d":
			return fmt.Errorf("entry %q: terraform.d/ holds local providers; providers come only from the agent's mirror", rel)
		}
	}
	if IsOverrideFile(parts[len(parts)-1]) {
		return fmt.Errorf("entry %q: override files are refused: Terraform merges them over the module's other files, so they change what was reviewed (and could replace the backend the agent sets); put the settings in the module's own files", rel)
	}
	return nil
}

// CheckLayer reads the entry headers of a module layer (a gzipped tar of
// the module's files) and refuses what a Checker refuses, a name that is
// not a relative path inside the module, any entry but a file or a
// directory, and files of more than MaxBytes together, naming the entry. The build agent runs it on a module it
// packages, so a vendor hears at package time what an agent would refuse.
func CheckLayer(tgz []byte) error {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	var c Checker
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
		if h.Typeflag != tar.TypeDir && h.Typeflag != tar.TypeReg {
			return fmt.Errorf("entry %q: type %q: only files and directories", h.Name, h.Typeflag)
		}
		if total += h.Size; total > MaxBytes {
			return fmt.Errorf("entry %q: the module's files come to more than %d bytes, the limit", h.Name, MaxBytes)
		}
		if name != "." {
			if err := c.Check(name); err != nil {
				return err
			}
		}
	}
}

// IsOverrideFile reports whether Terraform reads a file of this name as
// an override file.
func IsOverrideFile(base string) bool {
	for _, ext := range []string{".tf", ".tf.json"} {
		if stem, ok := strings.CutSuffix(base, ext); ok && (stem == "override" || strings.HasSuffix(stem, "_override")) {
			return true
		}
	}
	return false
}

// Walk calls fn for each directory and regular file of a module
// directory, in lexical order, by path relative to root; it skips
// .terraform and state files, refuses a symbolic link or any other
// special file, naming it (a link's target lies outside what is packed:
// it could be any file of the machine, and leaving it out silently would
// pack a module that differs from the directory), and refuses what a
// Checker refuses (override files, more than MaxEntries entries, deeper
// than MaxDepth).
func Walk(root string, fn func(rel string, d fs.DirEntry) error) error {
	var c Checker
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
		if err := c.Check(filepath.ToSlash(rel)); err != nil {
			return err
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
	if _, err := ParseRef(ref); err != nil {
		return "", err
	}
	if strings.Contains(ref, "@") {
		return "", fmt.Errorf("module %q: push to a tag, not a digest", ref)
	}
	layer, err := Pack(dir)
	if err != nil {
		return "", fmt.Errorf("pack %s: %w", dir, err)
	}
	return PushLayer(ctx, layer, registry, ref, creds)
}

// PushLayer is Push of a layer already packed (a gzipped tar of the
// module's files).
func PushLayer(ctx context.Context, layer []byte, registry, ref string, creds ocicopy.Credentials) (string, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return "", err
	}
	if strings.Contains(ref, "@") {
		return "", fmt.Errorf("module %q: push to a tag, not a digest", ref)
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
