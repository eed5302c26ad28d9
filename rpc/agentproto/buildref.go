package agentproto

import (
	"fmt"
	"regexp"
	"strings"
)

// Image components reference builds. imsd issues a pull grant for the
// repository of an image job's source, and the agent refuses to run one
// whose source is not a build of the vendor registry by digest (a tag, a
// registry host, a layout): both read it with ParseBuildRef.
const (
	// ImageType is the image component type.
	ImageType = "image"
	// ImageSourceKey is the image config's reference to a build:
	// REPOSITORY@sha256:DIGEST in the vendor registry.
	ImageSourceKey = "source"
)

var buildRef = regexp.MustCompile(`^([a-z0-9]+(?:(?:[._]|__|[-]*)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|[-]*)[a-z0-9]+)*)*)@(sha256:[a-f0-9]{64})$`)

// ParseBuildRef splits an image component's source, REPOSITORY@DIGEST
// (a build in the vendor registry), refusing a tag or a host.
func ParseBuildRef(ref string) (repository, digest string, err error) {
	// A first path element with a dot or a colon, or localhost, names a
	// registry host (as docker reads references, and the image type too):
	// that would be a pull from outside the vendor registry.
	if strings.HasPrefix(ref, "oci:") {
		return "", "", fmt.Errorf("image source %q is an OCI layout: components reference builds in the vendor registry (REPOSITORY@sha256:...; byoc build sync oci:DIR:TAG copies one there)", ref)
	}
	if first, _, ok := strings.Cut(ref, "/"); ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return "", "", fmt.Errorf("image source %q names registry %q: components reference builds in the vendor registry (REPOSITORY@sha256:...; byoc build sync copies an image there)", ref, first)
	}
	m := buildRef.FindStringSubmatch(ref)
	if m == nil {
		if i := strings.LastIndexByte(ref, ':'); i > 0 && !strings.Contains(ref, "@") && !strings.Contains(ref[i:], "/") {
			return "", "", fmt.Errorf("image source %q is a tag; components reference builds by digest (REPOSITORY@sha256:...; byoc build list)", ref)
		}
		return "", "", fmt.Errorf("image source %q: want REPOSITORY@sha256:<64 hex> in the vendor registry (no host, no tag)", ref)
	}
	return m[1], m[2], nil
}
