package agentproto

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

// nested returns a config whose value at key "a" is nested n objects deep:
// its innermost object sits at depth n.
func nested(n int) map[string]any {
	top := map[string]any{}
	cur := top
	for range n {
		next := map[string]any{}
		cur["a"] = next
		cur = next
	}
	return top
}

// TestConfigLimits: every limit is enforced by CheckConfig and by
// ConfigDigest (what the agent and imsd's wire side run) alike, with the
// value's path and the limit in the error.
func TestConfigLimits(t *testing.T) {
	wide := map[string]any{}
	for i := range MaxConfigKeys + 1 {
		wide["k"+strconv.Itoa(i)] = nil
	}
	long := make([]any, MaxConfigItems+1)
	for _, tc := range []struct {
		name       string
		cfg        map[string]any
		path, want string
	}{
		{"deep", nested(5000), "", "nested deeper than 100 levels"},
		{"deep in a list", map[string]any{"l": []any{nested(MaxConfigDepth)}}, ".l[0]", "nested deeper than 100 levels"},
		{"big", map[string]any{"s": strings.Repeat("x", MaxConfigBytes)}, ".s", "more than 1048576 bytes"},
		{"wide", map[string]any{"w": wide}, ".w", "10001 keys (the limit is 10000)"},
		{"long list", map[string]any{"x": map[string]any{"my key": long}}, `.x["my key"]`, "100001 items (the limit is 100000)"},
		{"long key", map[string]any{strings.Repeat("k", MaxConfigKeyBytes+1): 1.0}, `["kkkk`, "1025 bytes long (the limit is 1024)"},
		{"NaN", map[string]any{"n": []any{1.0, math.NaN()}}, ".n[1]", "NaN is not a finite number"},
		{"infinity", map[string]any{"n": math.Inf(-1)}, ".n", "-Inf is not a finite number"},
		{"bad UTF-8", map[string]any{"s": "\xff"}, ".s", "not valid UTF-8"},
		{"odd type", map[string]any{"s": struct{}{}}, ".s", "type struct {} has no place"},
	} {
		for _, f := range []struct {
			name string
			run  func(map[string]any) error
		}{
			{"CheckConfig", CheckConfig},
			{"ConfigDigest", func(c map[string]any) error { _, err := ConfigDigest(c); return err }},
		} {
			err := f.run(tc.cfg)
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Errorf("%s: %s: got %v, want a *ConfigError", tc.name, f.name, err)
				continue
			}
			if !strings.HasPrefix(ce.Path, tc.path) || !strings.Contains(ce.Problem, tc.want) {
				t.Errorf("%s: %s: got path %q problem %q, want path %q… and %q", tc.name, f.name, ce.Path, ce.Problem, tc.path, tc.want)
			}
			if len(ce.Path) > maxPathBytes+40 {
				t.Errorf("%s: %s: a path of %d bytes was not shortened", tc.name, f.name, len(ce.Path))
			}
		}
	}
	// At the limits, all is well; 90 levels is far from it.
	for _, cfg := range []map[string]any{nested(MaxConfigDepth), nested(90),
		{"s": strings.Repeat("x", MaxConfigBytes-64)}, {"l": make([]any, MaxConfigItems)},
		{strings.Repeat("k", MaxConfigKeyBytes): "v"}, nil} {
		if err := CheckConfig(cfg); err != nil {
			t.Errorf("CheckConfig refused a config within the limits: %v", err)
		}
		if _, err := ConfigDigest(cfg); err != nil {
			t.Errorf("ConfigDigest refused a config within the limits: %v", err)
		}
	}
	// CheckConfig takes TOML's and Go's integers; the digest, which is
	// only ever over decoded JSON, does not.
	if err := CheckConfig(map[string]any{"i": int64(1), "j": 2}); err != nil {
		t.Errorf("CheckConfig refused integers: %v", err)
	}
	if _, err := ConfigDigest(map[string]any{"i": int64(1)}); err == nil {
		t.Error("ConfigDigest took an int64")
	}
}
