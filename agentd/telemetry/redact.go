// Package telemetry is the agent's side of the app's telemetry forwarding
// (telemetry.toml): it scrapes the app's declared metrics endpoints
// (Prometheus text format, parsed with prometheus/common's expfmt) and
// reads new lines of its declared log files, applies the customer's
// telemetry setting (permissions.TelemetrySetting: off, metrics,
// metrics,logs; labels removed, log fields redacted, metrics dropped) on
// the agent before anything leaves, and hands bounded batches to the
// agent's stream. What cannot be held is dropped and counted, never
// queued without bound.
package telemetry

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"

	"github.com/byoc-dev/byoc/agentd/permissions"
)

// Redacted replaces the value of a redacted log field.
const Redacted = "[redacted]"

// Rules are a telemetry setting compiled: what the agent applies to every
// sample and line before it leaves.
type Rules struct {
	Setting permissions.TelemetrySetting
	labels  map[string]bool
	fields  map[string]bool
	drop    []*regexp.Regexp
	// pairs matches NAME=VALUE of every redacted field (logfmt lines).
	pairs *regexp.Regexp
}

// NewRules compiles s.
func NewRules(s permissions.TelemetrySetting) (*Rules, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	r := &Rules{Setting: s, labels: map[string]bool{}, fields: map[string]bool{}}
	for _, l := range s.RedactLabels {
		r.labels[l] = true
	}
	var alt []string
	for _, f := range s.RedactFields {
		r.fields[f] = true
		alt = append(alt, regexp.QuoteMeta(f))
	}
	if len(alt) > 0 {
		// The name not inside a longer one (a letter, digit, _ or -
		// before or after it: mypassword, password_hint), quoted or not,
		// then = or :, and a double- or single-quoted or bare value: a
		// logfmt pair, a URL's query parameter (&password=), a dotted
		// key (db.password=), "password": "..." in text that is not
		// JSON.
		r.pairs = regexp.MustCompile(`(^|[^A-Za-z0-9_-])(\\?"?)(` + strings.Join(alt, "|") + `)(\\?"?)(\s*[=:]\s*)("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s,;}]*)`)
	}
	r.drop, _ = s.DropPatterns()
	return r, nil
}

// Dropped reports whether metric name is never forwarded.
func (r *Rules) Dropped(name string) bool {
	return slices.ContainsFunc(r.drop, func(re *regexp.Regexp) bool { return re.MatchString(name) })
}

// Labels returns labels without the redacted ones (labels itself when
// none is).
func (r *Rules) Labels(labels map[string]string) map[string]string {
	for l := range labels {
		if r.labels[l] {
			delete(labels, l)
		}
	}
	return labels
}

// Line redacts the fields of one log line: in a line that is a JSON
// object, every key (at any depth) named by a rule gets the value
// [redacted], and so do such pairs inside its string values; in any
// other line, NAME=VALUE and NAME: VALUE pairs of such a field (logfmt,
// a URL's query, with a quoted or bare value) do.
func (r *Rules) Line(text string) string {
	if len(r.fields) == 0 {
		return text
	}
	if t := strings.TrimSpace(text); strings.HasPrefix(t, "{") {
		var obj map[string]any
		if json.Unmarshal([]byte(t), &obj) == nil {
			if r.redactJSON(obj) {
				if b, err := json.Marshal(obj); err == nil {
					return string(b)
				}
			}
			return text
		}
	}
	return r.pairs.ReplaceAllString(text, pairRepl)
}

// redactJSON redacts v's fields in place, reporting whether any was.
func (r *Rules) redactJSON(v any) bool {
	changed := false
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if r.fields[k] {
				x[k] = Redacted
				changed = true
			} else if s, ok := e.(string); ok {
				if red := r.pairs.ReplaceAllString(s, pairRepl); red != s {
					x[k], changed = red, true
				}
			} else if r.redactJSON(e) {
				changed = true
			}
		}
	case []any:
		for i, e := range x {
			if s, ok := e.(string); ok {
				if red := r.pairs.ReplaceAllString(s, pairRepl); red != s {
					x[i], changed = red, true
				}
			} else if r.redactJSON(e) {
				changed = true
			}
		}
	}
	return changed
}

// pairRepl keeps a matched pair's name and separator and masks its value.
const pairRepl = `$1$2$3$4$5` + Redacted
