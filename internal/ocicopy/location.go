// Package ocicopy copies OCI content (images, multi-platform indexes, OCI
// 1.1 artifacts with their referrers, Helm charts and Terraform modules
// packed as artifacts) by digest between registries and OCI image layout
// directories, on oras-go v2.
//
// A copy is two steps. PlanCopy reads the whole manifest graph from the
// source (verifying every manifest's digest and size) and asks the
// destination which nodes it already has; Plan.Apply then sends only the
// missing blobs, in parallel, each checked against its digest and size
// by the destination as it takes it (and, with Options.LocalVerify, here
// while it streams), and pushes the manifests last, children before
// parents. So an unchanged
// re-sync sends no blob bytes, an interrupted copy applied again sends
// only what did not complete, and a source that fails during a copy
// leaves the destination with nothing but unreferenced blobs: no manifest
// of the copy is pushed before every blob is there.
//
// Locations are strings, one syntax everywhere (agentd's
// --install-registry, the image type's config): see ParseRegistry and
// ParseReference.
package ocicopy

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/opencontainers/go-digest"
)

// Registry is where repositories live: a registry reached over HTTP(S),
// or the root of OCI image layout directories, one per repository.
type Registry struct {
	// Host is the registry's host[:port]; empty for a layout root.
	Host string
	// PlainHTTP: the registry speaks HTTP, not HTTPS.
	PlainHTTP bool
	// Prefix is put before every repository name ("team" makes
	// repository "api" the registry's "team/api"); may be empty.
	Prefix string
	// LayoutRoot is the directory whose subdirectory R is the OCI image
	// layout of repository R; empty for a registry.
	LayoutRoot string
}

// IsLayout reports whether r is an OCI image layout root.
func (r Registry) IsLayout() bool { return r.LayoutRoot != "" }

// String gives r in the syntax ParseRegistry reads.
func (r Registry) String() string {
	if r.IsLayout() {
		return "oci:" + r.LayoutRoot
	}
	s := r.Host
	if r.Prefix != "" {
		s += "/" + r.Prefix
	}
	switch {
	case r.PlainHTTP && !isLoopback(r.Host):
		return "http://" + s
	case !r.PlainHTTP && isLoopback(r.Host):
		return "https://" + s
	}
	return s
}

// repoPath is the repository's full name in the registry (its prefix
// included), or its layout directory.
func (r Registry) repoPath(repository string) string {
	if r.IsLayout() {
		return filepath.Join(r.LayoutRoot, filepath.FromSlash(repository))
	}
	if r.Prefix != "" {
		return r.Prefix + "/" + repository
	}
	return repository
}

// ParseRegistry reads a registry location:
//
//	http://HOST[:PORT][/PREFIX]    a registry over plain HTTP
//	https://HOST[:PORT][/PREFIX]   a registry over HTTPS
//	HOST[:PORT][/PREFIX]           HTTPS, or plain HTTP for a loopback host
//	                               (localhost, 127.0.0.1, ::1)
//	oci:DIR, or an absolute DIR    a root of OCI image layouts: repository
//	                               R is the layout directory DIR/R
func ParseRegistry(s string) (Registry, error) {
	if s == "" {
		return Registry{}, errors.New("empty registry location")
	}
	if dir, ok := strings.CutPrefix(s, "oci:"); ok || strings.HasPrefix(s, "/") {
		if !ok {
			dir = s
		}
		if dir == "" {
			return Registry{}, fmt.Errorf("registry location %q: oci: names no directory", s)
		}
		abs, err := filepath.Abs(dir)
		if err != nil {
			return Registry{}, fmt.Errorf("registry location %q: %w", s, err)
		}
		return Registry{LayoutRoot: abs}, nil
	}
	var r Registry
	rest := s
	scheme := ""
	if i := strings.Index(s, "://"); i >= 0 {
		scheme, rest = s[:i], s[i+3:]
		if scheme != "http" && scheme != "https" {
			return Registry{}, fmt.Errorf("registry location %q: scheme %q: want http, https, oci: or none", s, scheme)
		}
	}
	host, prefix, _ := strings.Cut(strings.TrimSuffix(rest, "/"), "/")
	if err := checkHost(host); err != nil {
		return Registry{}, fmt.Errorf("registry location %q: %w", s, err)
	}
	if prefix != "" && !repoName.MatchString(prefix) {
		return Registry{}, fmt.Errorf("registry location %q: path %q is not a valid repository prefix (lowercase letters, digits, separators . _ - /)", s, prefix)
	}
	r.Host, r.Prefix = host, prefix
	switch scheme {
	case "http":
		r.PlainHTTP = true
	case "":
		r.PlainHTTP = isLoopback(host)
	}
	return r, nil
}

// Reference names one artifact: a repository in a registry and a digest
// (and, informational only, a tag).
type Reference struct {
	Registry   Registry
	Repository string
	// Tag is informational: a copy never resolves it.
	Tag string
	// Digest is empty when the reference named a tag only.
	Digest digest.Digest
}

// String gives ref in the syntax ParseReference reads.
func (ref Reference) String() string {
	var s string
	if ref.Registry.IsLayout() {
		s = "oci:" + ref.Registry.repoPath(ref.Repository)
	} else {
		s = ref.Registry.String() + "/" + ref.Repository
	}
	if ref.Tag != "" {
		s += ":" + ref.Tag
	}
	if ref.Digest != "" {
		s += "@" + ref.Digest.String()
	}
	return s
}

// ErrNoDigest is returned (wrapped) by ParseReference's callers that need
// a digest; ParseReference itself accepts a tag-only reference and leaves
// Digest empty.
var ErrNoDigest = errors.New("names a tag only: reference a digest (REPOSITORY@sha256:...), since a tag can change")

// ParseReference reads an artifact reference:
//
//	[http(s)://]HOST[:PORT]/REPOSITORY[:TAG][@sha256:HEX]
//	oci:DIR[:TAG][@sha256:HEX]     the OCI image layout DIR (its base name
//	                               is the repository)
//
// A reference naming no digest is returned with Digest empty (see
// ErrNoDigest). Repository names follow the distribution spec.
func ParseReference(s string) (Reference, error) {
	var ref Reference
	rest := s
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		d, err := digest.Parse(rest[at+1:])
		if err != nil {
			return Reference{}, fmt.Errorf("reference %q: digest %q: %v", s, rest[at+1:], err)
		}
		ref.Digest, rest = d, rest[:at]
	}
	if dir, ok := strings.CutPrefix(rest, "oci:"); ok {
		// A tag in a path is the part after the last colon of the last
		// element.
		if i := strings.LastIndex(dir, ":"); i > strings.LastIndex(dir, "/") {
			dir, ref.Tag = dir[:i], dir[i+1:]
		}
		if dir == "" {
			return Reference{}, fmt.Errorf("reference %q: oci: names no directory", s)
		}
		abs, err := filepath.Abs(dir)
		if err != nil {
			return Reference{}, fmt.Errorf("reference %q: %w", s, err)
		}
		ref.Registry = Registry{LayoutRoot: filepath.Dir(abs)}
		ref.Repository = filepath.Base(abs)
		if !repoName.MatchString(ref.Repository) {
			return Reference{}, fmt.Errorf("reference %q: the layout directory's name %q is not a valid repository name (lowercase letters, digits, separators . _ -)", s, ref.Repository)
		}
		return ref, ref.checkTag(s)
	}
	scheme := ""
	if i := strings.Index(rest, "://"); i >= 0 {
		scheme = rest[:i]
		if scheme != "http" && scheme != "https" {
			return Reference{}, fmt.Errorf("reference %q: scheme %q: want http://, https://, oci:DIR or none", s, scheme)
		}
	}
	slash := strings.Index(strings.TrimPrefix(rest, scheme+"://"), "/")
	if slash < 0 {
		return Reference{}, fmt.Errorf("reference %q: want REGISTRY/REPOSITORY@sha256:..., found no repository", s)
	}
	if scheme != "" {
		slash += len(scheme) + 3
	}
	reg, err := ParseRegistry(rest[:slash])
	if err != nil {
		return Reference{}, fmt.Errorf("reference %q: %w", s, err)
	}
	repo := rest[slash+1:]
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo, ref.Tag = repo[:i], repo[i+1:]
	}
	if !repoName.MatchString(repo) {
		return Reference{}, fmt.Errorf("reference %q: repository %q is not valid (lowercase letters, digits, separators . _ - /)", s, repo)
	}
	ref.Registry, ref.Repository = reg, repo
	return ref, ref.checkTag(s)
}

func (ref Reference) checkTag(s string) error {
	if ref.Tag != "" && !tagName.MatchString(ref.Tag) {
		return fmt.Errorf("reference %q: tag %q is not valid", s, ref.Tag)
	}
	return nil
}

// The distribution spec's name and tag grammars.
var (
	repoName = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*)*$`)
	tagName  = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)
)

// ValidRepository reports whether name is a valid repository name.
func ValidRepository(name string) bool { return repoName.MatchString(name) }

func checkHost(host string) error {
	if host == "" {
		return errors.New("no host")
	}
	h := host
	if sh, port, err := net.SplitHostPort(host); err == nil {
		if port == "" {
			return fmt.Errorf("host %q: empty port", host)
		}
		h = sh
	}
	if h == "" || strings.ContainsAny(h, " /@?#") {
		return fmt.Errorf("host %q is not valid", host)
	}
	return nil
}

// isLoopback reports whether host[:port] names this machine.
func isLoopback(host string) bool {
	h := host
	if sh, _, err := net.SplitHostPort(host); err == nil {
		h = sh
	}
	h = strings.Trim(h, "[]")
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
