package load

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/byoc-dev/byoc/schema/app/diag"
	"github.com/byoc-dev/byoc/schema/app/validate"
)

// FuzzParse reads whole app configs, given as txtar archives ("-- name --"
// lines start files), through the decoder and the validator, and checks
// that Parse does not panic, that it fails only with a *diag.Error, and
// that every problem names a file of the app (or the missing app.toml),
// a message, and a line of that file; only a problem about a whole file
// (no key) or about a name taken from the file's name (key "name") may
// have no line.
func FuzzParse(f *testing.F) {
	paths, _ := filepath.Glob("testdata/*.txtar")
	if len(paths) == 0 {
		f.Fatal("no seeds")
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		if i := bytes.Index(b, []byte("\n-- want --\n")); i >= 0 {
			b = b[:i+1]
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, files, _ := parseTxtar(data)
		_, err := Parse(files, validate.Options{})
		if err == nil {
			return
		}
		var de *diag.Error
		if !errors.As(err, &de) {
			t.Fatalf("%T is not a *diag.Error: %v", err, err)
		}
		for _, d := range de.Diagnostics {
			b, ok := files[d.File]
			if !ok && d.File != "app.toml" {
				t.Fatalf("%q names a file the app does not have", d.String())
			}
			lines := bytes.Count(b, []byte("\n")) + 1
			if d.Message == "" || d.Line < 0 || d.Line > lines {
				t.Fatalf("%q: no message, or a line outside 1-%d", d.String(), lines)
			}
			if d.Line == 0 && d.Key != "" && d.Key != "name" {
				t.Fatalf("%q names no line", d.String())
			}
		}
	})
}
