package cdktf

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Package is the files of a CDKTF provider package the converter reads:
// its .jsii and its lib/**/*.js, by path inside the package
// (".jsii", "lib/compute-instance/index.js").
type Package struct {
	files map[string][]byte
}

// wanted reports whether the converter reads the file at path.
func wanted(path string) bool {
	return path == ".jsii" || strings.HasPrefix(path, "lib/") && strings.HasSuffix(path, ".js")
}

// ReadTarball reads a package from its npm tarball (.tgz, whose files
// are under package/), without unpacking it to disk.
func ReadTarball(path string) (*Package, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	p := &Package{files: map[string][]byte{}}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		name, ok := strings.CutPrefix(h.Name, "package/")
		if !ok || h.Typeflag != tar.TypeReg || !wanted(name) {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, h.Name, err)
		}
		p.files[name] = b
	}
	if p.files[".jsii"] == nil {
		return nil, fmt.Errorf("%s: no package/.jsii: not a CDKTF provider package", path)
	}
	return p, nil
}

// ReadDir reads a package unpacked in dir (the folder holding .jsii).
func ReadDir(dir string) (*Package, error) {
	p := &Package{files: map[string][]byte{}}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if !wanted(rel) {
			return nil
		}
		b, err := os.ReadFile(path)
		p.files[rel] = b
		return err
	})
	if err != nil {
		return nil, err
	}
	if p.files[".jsii"] == nil {
		return nil, fmt.Errorf("%s: no .jsii: not a CDKTF provider package", dir)
	}
	return p, nil
}
