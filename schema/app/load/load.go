// Package load reads an app config: its files from a directory (Dir, FS)
// or as given (Parse), decoded by package config and checked by package
// validate, every problem reported at once in a *diag.Error. It also holds
// the commented example app that byoc app init writes.
package load

import (
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/byoc-dev/byoc/schema/app/config"
	"github.com/byoc-dev/byoc/schema/app/diag"
	"github.com/byoc-dev/byoc/schema/app/validate"
)

// Dir reads and validates the app config in directory dir.
func Dir(dir string, opts validate.Options) (*config.App, error) {
	if st, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("app config: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("app config: %s is not a directory", dir)
	}
	return FS(os.DirFS(dir), opts)
}

// FS reads and validates the app config in fsys. On any problem it
// returns a *diag.Error listing all of them.
func FS(fsys fs.FS, opts validate.Options) (*config.App, error) {
	files, err := readFiles(fsys)
	if err != nil {
		return nil, err
	}
	return Parse(files, opts)
}

// readFiles reads every regular file of the config, skipping hidden files
// and folders (.git and editor files).
func readFiles(fsys fs.FS) (map[string][]byte, error) {
	files := map[string][]byte{}
	err := fs.WalkDir(fsys, ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != "." && strings.HasPrefix(e.Name(), ".") {
			if e.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if !e.Type().IsRegular() {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		if info.Size() > config.MaxFileBytes {
			return fmt.Errorf("app config: %s is %d bytes; files may be at most %d", p, info.Size(), config.MaxFileBytes)
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		files[p] = b
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("app config: %w", err)
	}
	return files, nil
}

// Parse reads and validates an app config given as its files, by
// slash-separated path relative to the app directory. On any problem it
// returns a *diag.Error listing all of them, in file and line order.
func Parse(files map[string][]byte, opts validate.Options) (*config.App, error) {
	ds := &diag.List{Rank: config.FileRank}
	a := config.Decode(files, ds)
	// A file with a TOML syntax error defines nothing: the checks across
	// files would report every reference to what it defines ("no component
	// named db") as errors of their own. Its syntax error is the one to fix.
	if len(a.Unparsed()) == 0 {
		validate.Check(a, ds, opts)
	}
	if err := ds.Err(); err != nil {
		return nil, err
	}
	a.Warnings = ds.Warnings()
	return a, nil
}
