// Command genschema writes the JSON Schemas of the app config format into
// schema/app/jsonschema/ (run by `make generate`).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/byoc-dev/byoc/schema/app/jsonschema"
)

func main() {
	dir := "schema/app/jsonschema"
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "genschema:", err)
		os.Exit(1)
	}
	for name, b := range jsonschema.Files() {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "genschema:", err)
			os.Exit(1)
		}
	}
}
