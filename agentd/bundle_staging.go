package main

import (
	"fmt"
	"io"

	"github.com/byoc-dev/byoc/internal/stagedir"
)

// stagingPrefix starts the name of the folder an import unpacks a
// bundle's small files into, beside the bundle (os.MkdirTemp adds digits).
const stagingPrefix = ".byoc-bundle-"

// bundleStaging is the folders imports unpack into: each locked by its
// import while it runs, so a folder nobody holds is a leftover of an
// import that was killed (internal/stagedir).
var bundleStaging = stagedir.Kind{Prefix: stagingPrefix, Noun: "import"}

// stageImport removes what imports killed in dir left, printing each to
// out, then makes this import's staging folder there.
func stageImport(dir string, out io.Writer) (*stagedir.Dir, error) {
	return bundleStaging.Stage(dir, func(msg string) { fmt.Fprintln(out, msg) })
}
