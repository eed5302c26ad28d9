package helm

import (
	"encoding/base64"
	"fmt"
	"time"

	"github.com/byoc-dev/byoc/plugins/sdk"
)

// config is a helm component's config, decoded after the SDK checked it
// against helmschema.Config.
type config struct {
	Release         string
	Namespace       string
	CreateNamespace bool
	Chart           string   // oci:DIR@sha256:HEX
	ChartDir        string   // a local chart directory
	Manifests       []string // raw manifests (manifests, or manifests_base64 decoded)
	Values          map[string]any
	Wait            bool
	Timeout         time.Duration
	RollbackOnFail  bool
	HistoryMax      int
}

// parseConfig decodes raw, naming each field it refuses.
func parseConfig(raw map[string]any) (*config, []sdk.Diagnostic) {
	c := &config{Namespace: "default", Wait: true, Timeout: 5 * time.Minute, RollbackOnFail: true, HistoryMax: 10}
	var diags []sdk.Diagnostic
	bad := func(field, format string, args ...any) {
		diags = append(diags, sdk.Diagnostic{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	c.Release, _ = raw["release"].(string)
	if ns, ok := raw["namespace"].(string); ok {
		c.Namespace = ns
	}
	c.CreateNamespace, _ = raw["create_namespace"].(bool)
	c.Chart, _ = raw["chart"].(string)
	c.ChartDir, _ = raw["chart_dir"].(string)
	if ms, ok := raw["manifests"].([]any); ok {
		for _, m := range ms {
			s, _ := m.(string)
			c.Manifests = append(c.Manifests, s)
		}
	}
	encoded, _ := raw["manifests_base64"].([]any)
	for i, m := range encoded {
		s, _ := m.(string)
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			bad(fmt.Sprintf("manifests_base64[%d]", i), "not base64: %v", err)
			continue
		}
		c.Manifests = append(c.Manifests, string(b))
	}
	sources := 0
	for _, set := range []bool{c.Chart != "", c.ChartDir != "", raw["manifests"] != nil, encoded != nil} {
		if set {
			sources++
		}
	}
	if sources != 1 {
		bad("chart", "set exactly one of chart, chart_dir, manifests and manifests_base64 (%d set)", sources)
	}
	if c.Chart != "" {
		if _, err := parseChartRef(c.Chart); err != nil {
			bad("chart", "%v", err)
		}
	}
	if v, ok := raw["values"].(map[string]any); ok {
		c.Values = v
	}
	if w, ok := raw["wait"].(bool); ok {
		c.Wait = w
	}
	if s, ok := raw["timeout"].(string); ok {
		d, err := time.ParseDuration(s)
		switch {
		case err != nil:
			bad("timeout", "not a Go duration (such as 90s or 5m): %q", s)
		case d <= 0:
			bad("timeout", "must be positive, not %s", s)
		default:
			c.Timeout = d
		}
	}
	if r, ok := raw["rollback_on_failure"].(bool); ok {
		c.RollbackOnFail = r
	}
	if h, ok := raw["history_max"].(float64); ok {
		if h != float64(int(h)) || h < 1 {
			bad("history_max", "must be a whole number of at least 1, not %v", h)
		} else {
			c.HistoryMax = int(h)
		}
	}
	return c, diags
}
