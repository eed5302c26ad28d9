package workflow

import (
	"context"
	"sync"

	"github.com/byoc-dev/byoc/plugins/sdk/configschema"
	"github.com/byoc-dev/byoc/plugins/typeschema"
)

// schemaCache keeps compiled config schemas by their source: the built-in
// types' are constants, and a registered type's changes only when it is
// registered again (a new source, compiled once).
type schemaCache struct {
	mu sync.Mutex
	m  map[string]*configschema.Schema
}

func (c *schemaCache) compile(src string) *configschema.Schema {
	if src == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.m[src]; ok {
		return s
	}
	// Schemas were compiled when registered (and the built-in ones by
	// typeschema's tests); one that fails now renders as if it had none.
	s, _ := configschema.Compile(src)
	if c.m == nil || len(c.m) > 1000 {
		c.m = map[string]*configschema.Schema{}
	}
	c.m[src] = s
	return s
}

// schemas returns the config schemas of the built-in and the registered
// component types, by type (nil for a type without one), which decide
// where a rendered reference keeps its type (Renderer.Config).
func (e *Engine) schemas(ctx context.Context) (map[string]*configschema.Schema, error) {
	types, err := e.st.ListPluginTypes(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*configschema.Schema, len(types)+4)
	for _, p := range types {
		out[p.Type] = e.schemaCache.compile(p.ConfigSchema)
	}
	for _, t := range typeschema.BuiltinNames() {
		src, _ := typeschema.BuiltinSchema(t)
		out[t] = e.schemaCache.compile(src)
	}
	return out, nil
}
