package load

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

// example is the commented example app that `byoc app init` writes.
//
//go:embed example
var example embed.FS

// ExampleFiles returns the example app's files by path.
func ExampleFiles() map[string][]byte {
	sub, _ := fs.Sub(example, "example")
	files, err := readFiles(sub)
	if err != nil {
		panic(err) // embedded: cannot fail
	}
	return files
}

// WriteExample writes the example app into dir, creating it if needed. It
// writes nothing if any of its files exists already.
func WriteExample(dir string) ([]string, error) {
	files := ExampleFiles()
	paths := slices.Sorted(maps.Keys(files))
	for _, p := range paths {
		if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
			return nil, fmt.Errorf("%s exists already; byoc app init writes only into an empty directory", filepath.Join(dir, p))
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	for _, p := range paths {
		dst := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return nil, err
		}
		mode := os.FileMode(0o644)
		if filepath.Ext(p) == ".sh" {
			mode = 0o755
		}
		if err := os.WriteFile(dst, files[p], mode); err != nil {
			return nil, err
		}
	}
	return paths, nil
}
