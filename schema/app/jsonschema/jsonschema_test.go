package jsonschema

import (
	"bytes"
	"os"
	"testing"
)

// The committed JSON Schemas must be what the Go types generate.
func TestSchemaFilesUpToDate(t *testing.T) {
	for name, want := range Files() {
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatalf("%v: run make generate", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is out of date: run make generate", name)
		}
	}
}
