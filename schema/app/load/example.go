package load

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/byoc-dev/byoc/schema/app/config"
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

// ExampleFilesFor returns the example app for one cloud (aws, azure or gcp):
// app.toml's clouds lists only it, and permissions.toml keeps only its
// keys. "" is the example as it is, for every cloud.
func ExampleFilesFor(cloud string) (map[string][]byte, error) {
	files := ExampleFiles()
	var drop *regexp.Regexp
	switch cloud {
	case "":
		return files, nil
	case config.CloudAWS:
		drop = regexp.MustCompile(`(?m)^(azure_roles|gcp_roles) = .*\n`)
	case config.CloudAzure:
		drop = regexp.MustCompile(`(?m)^(policies|permissions_boundary|statements|gcp_roles) = .*\n`)
	case config.CloudGCP:
		drop = regexp.MustCompile(`(?m)^(policies|permissions_boundary|statements|azure_roles) = .*\n`)
	default:
		return nil, fmt.Errorf("%q is not a cloud byoc installs on (known: %s)", cloud, strings.Join(config.Clouds, ", "))
	}
	files["permissions.toml"] = drop.ReplaceAll(files["permissions.toml"], nil)
	files["app.toml"] = bytes.Replace(files["app.toml"], []byte(`clouds = ["aws", "azure", "gcp"]`), []byte(`clouds = ["`+cloud+`"]`), 1)
	return files, nil
}

// WriteExample writes the example app into dir, creating it if needed. It
// writes nothing if any of its files exists already.
func WriteExample(dir string) ([]string, error) { return WriteExampleFor(dir, "") }

// WriteExampleFor is WriteExample of ExampleFilesFor(cloud).
func WriteExampleFor(dir, cloud string) ([]string, error) {
	files, err := ExampleFilesFor(cloud)
	if err != nil {
		return nil, err
	}
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
