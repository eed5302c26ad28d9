package main

import (
	"fmt"
	"io"
	"os"

	"github.com/byoc-dev/byoc/internal/stagedir"
)

// stagingPrefix starts the name of the folder an import unpacks a
// bundle's small files into, in the state directory's stagingDir
// (os.MkdirTemp adds digits).
const stagingPrefix = ".byoc-bundle-"

// stagingDir is the folder of the state directory imports stage in.
const stagingDir = "staging"

// bundleStaging is the folders imports unpack into: each locked by its
// import while it runs, so a folder nobody holds is a leftover of an
// import that was killed (internal/stagedir).
var bundleStaging = stagedir.Kind{Prefix: stagingPrefix, Noun: "import"}

// stageImport removes what imports killed in dir left, printing each to
// out, then makes this import's staging folder there (dir is made, 0700,
// if it is not there).
func stageImport(dir string, out io.Writer) (*stagedir.Dir, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("staging folder: %w", err)
	}
	return bundleStaging.Stage(dir, func(msg string) { fmt.Fprintln(out, msg) })
}
