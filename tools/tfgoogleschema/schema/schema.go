// Package schema is a Terraform provider's schema as a file: the shape
// `terraform providers schema -json` prints for one provider (provider,
// resource_schemas, data_source_schemas; blocks of attributes with cty
// JSON types and nested block types), written gzipped beside the
// stand-in provider's binary by the converter and read by the server.
package schema

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// Provider is one provider's schemas.
type Provider struct {
	Provider          *Schema            `json:"provider"`
	ResourceSchemas   map[string]*Schema `json:"resource_schemas"`
	DataSourceSchemas map[string]*Schema `json:"data_source_schemas"`
}

// Schema is the schema of a provider's configuration, a resource type or
// a data source.
type Schema struct {
	Version int64  `json:"version"`
	Block   *Block `json:"block"`
}

// Block is a configuration block: its attributes and nested blocks.
type Block struct {
	Attributes map[string]*Attribute   `json:"attributes,omitempty"`
	BlockTypes map[string]*NestedBlock `json:"block_types,omitempty"`
}

// Attribute is one attribute; Type is its cty type in cty's JSON form
// ("string", ["list","string"], ["object",{"a":"number"}]).
type Attribute struct {
	Type     json.RawMessage `json:"type"`
	Required bool            `json:"required,omitempty"`
	Optional bool            `json:"optional,omitempty"`
	Computed bool            `json:"computed,omitempty"`
}

// Nesting modes of a nested block, as Terraform names them.
const (
	NestingSingle = "single"
	NestingList   = "list"
	NestingSet    = "set"
)

// NestedBlock is a block type nested in another block.
type NestedBlock struct {
	NestingMode string `json:"nesting_mode"`
	Block       *Block `json:"block"`
	MinItems    int64  `json:"min_items,omitempty"`
	MaxItems    int64  `json:"max_items,omitempty"`
}

// Write writes p to path as gzipped JSON.
func Write(path string, p *Provider) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	zw := gzip.NewWriter(f)
	if err := json.NewEncoder(zw).Encode(p); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return zw.Close()
}

// Read reads a schema Write wrote.
func Read(path string) (*Provider, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var p Provider
	if err := json.NewDecoder(zr).Decode(&p); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if _, err := io.Copy(io.Discard, zr); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if p.Provider == nil || p.Provider.Block == nil {
		return nil, fmt.Errorf("read %s: no provider schema", path)
	}
	return &p, nil
}
