package ocicopy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/byoc-dev/byoc/internal/atomicfile"
)

// A layout repository's index.json and oci-layout are written by byoc,
// whole or not at all (internal/atomicfile), not by oras-go: its OCI
// store rewrites index.json in place (truncate, then write), so a crash
// in between left an empty or torn index.json, and the repository
// (an install registry, with its images' signatures, found through the
// index) would not open again. The store is opened with AutoSaveIndex
// off, and the Repo keeps the index as the store would save it: every
// manifest pushed listed by digest, and each tag as its own entry
// (org.opencontainers.image.ref.name), a manifest listed untagged only
// while no tag names it.

// prepareLayout makes dir an OCI image layout whose oci-layout and
// index.json files are whole, writing those missing (each at once, or
// not at all), and returns its index. A file that is there but cannot
// be read as one (torn by a crash of an earlier writer) is an error
// naming it: its blobs are intact, but which manifests and tags it
// listed is not known.
func prepareLayout(dir string) (*ocispec.Index, error) {
	if err := os.MkdirAll(filepath.Join(dir, ocispec.ImageBlobsDir), 0o755); err != nil {
		return nil, err
	}
	lp := filepath.Join(dir, ocispec.ImageLayoutFile)
	var l ocispec.ImageLayout
	if b, err := os.ReadFile(lp); errors.Is(err, fs.ErrNotExist) {
		b, _ := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
		if err := atomicfile.Write(lp, b, 0o644); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	} else if json.Unmarshal(b, &l) != nil {
		return nil, tornFile(lp, len(b))
	}
	ip := filepath.Join(dir, ocispec.ImageIndexFile)
	b, err := os.ReadFile(ip)
	if errors.Is(err, fs.ErrNotExist) {
		idx := &ocispec.Index{MediaType: ocispec.MediaTypeImageIndex, Manifests: []ocispec.Descriptor{}}
		idx.SchemaVersion = 2
		return idx, writeIndex(dir, idx)
	}
	if err != nil {
		return nil, err
	}
	var idx ocispec.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, tornFile(ip, len(b))
	}
	if idx.Manifests == nil {
		idx.Manifests = []ocispec.Descriptor{}
	}
	return &idx, nil
}

// tornFile is the error of a layout file that is not what it must be.
func tornFile(path string, size int) error {
	return fmt.Errorf("%s is not a whole OCI layout file (%d bytes): cut short by a crash of a program that wrote it in place? The layout's blobs are intact, but not which manifests and tags it listed: restore the file from a backup, or move the layout aside and load its content again", path, size)
}

// writeIndex writes idx as dir's index.json, whole or not at all.
func writeIndex(dir string, idx *ocispec.Index) error {
	b, err := json.Marshal(idx)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, ocispec.ImageIndexFile), b, 0o644); err != nil {
		return fmt.Errorf("write the index of OCI layout %s: %w", dir, err)
	}
	return nil
}

// indexed records in idx that desc, a manifest, was pushed (ref "") or
// tagged ref, as oras-go's store would save it; it reports whether idx
// changed.
func indexed(idx *ocispec.Index, desc ocispec.Descriptor, ref string) bool {
	refName := func(d ocispec.Descriptor) string { return d.Annotations[ocispec.AnnotationRefName] }
	plain := func(d ocispec.Descriptor) ocispec.Descriptor {
		if _, ok := d.Annotations[ocispec.AnnotationRefName]; ok {
			d.Annotations = maps.Clone(d.Annotations)
			delete(d.Annotations, ocispec.AnnotationRefName)
			if len(d.Annotations) == 0 {
				d.Annotations = nil
			}
		}
		return d
	}
	if ref == "" || ref == desc.Digest.String() {
		if slices.ContainsFunc(idx.Manifests, func(d ocispec.Descriptor) bool { return d.Digest == desc.Digest }) {
			return false
		}
		idx.Manifests = append(idx.Manifests, plain(desc))
		return true
	}
	if i := slices.IndexFunc(idx.Manifests, func(d ocispec.Descriptor) bool { return refName(d) == ref }); i >= 0 && content.Equal(plain(idx.Manifests[i]), plain(desc)) {
		return false
	}
	// The tag moves: the manifest it named stays listed, untagged, if
	// no other tag names it.
	var moved []ocispec.Descriptor
	idx.Manifests = slices.DeleteFunc(idx.Manifests, func(d ocispec.Descriptor) bool {
		if refName(d) == ref {
			moved = append(moved, plain(d))
			return true
		}
		return refName(d) == "" && d.Digest == desc.Digest
	})
	for _, d := range moved {
		if !slices.ContainsFunc(idx.Manifests, func(e ocispec.Descriptor) bool { return e.Digest == d.Digest }) && d.Digest != desc.Digest {
			idx.Manifests = append(idx.Manifests, d)
		}
	}
	tagged := plain(desc)
	tagged.Annotations = maps.Clone(tagged.Annotations)
	if tagged.Annotations == nil {
		tagged.Annotations = map[string]string{}
	}
	tagged.Annotations[ocispec.AnnotationRefName] = ref
	idx.Manifests = append(idx.Manifests, tagged)
	return true
}
