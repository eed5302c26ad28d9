package permissions

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Telemetry modes: what of the app's declared telemetry (telemetry.toml)
// the agent forwards to imsd.
const (
	TelemetryOff         = "off"
	TelemetryMetrics     = "metrics"
	TelemetryMetricsLogs = "metrics,logs"
)

// TelemetrySetting is the customer's telemetry setting (agentd telemetry
// set), kept in permissions.json and so signed like the permission
// modes: imsd cannot change it. The zero value is off: nothing is
// scraped, read or forwarded.
type TelemetrySetting struct {
	// Mode is off (""), metrics or metrics,logs.
	Mode string `json:"mode,omitempty"`
	// RedactLabels are metric labels removed from every sample.
	RedactLabels []string `json:"redact_labels,omitempty"`
	// RedactFields are log fields (a JSON object's keys, at any depth,
	// or key=value pairs) whose values are replaced by [redacted].
	RedactFields []string `json:"redact_fields,omitempty"`
	// DropMetrics are regular expressions (RE2, matching the whole
	// name) of metric names never forwarded.
	DropMetrics []string `json:"drop_metrics,omitempty"`
}

// Equal reports whether t and o say the same.
func (t TelemetrySetting) Equal(o TelemetrySetting) bool {
	return t.mode() == o.mode() && slices.Equal(t.RedactLabels, o.RedactLabels) &&
		slices.Equal(t.RedactFields, o.RedactFields) && slices.Equal(t.DropMetrics, o.DropMetrics)
}

func (t TelemetrySetting) mode() string {
	if t.Mode == "" {
		return TelemetryOff
	}
	return t.Mode
}

// ModeName is the mode as shown: off, metrics or metrics,logs.
func (t TelemetrySetting) ModeName() string { return t.mode() }

// Metrics reports whether metrics are forwarded.
func (t TelemetrySetting) Metrics() bool {
	return t.Mode == TelemetryMetrics || t.Mode == TelemetryMetricsLogs
}

// Logs reports whether log lines are forwarded.
func (t TelemetrySetting) Logs() bool { return t.Mode == TelemetryMetricsLogs }

// ParseTelemetryMode reads a mode as agentd telemetry set takes it:
// off, metrics, or metrics,logs (in either order; "logs" alone is not a
// mode: logs are forwarded only with metrics).
func ParseTelemetryMode(s string) (string, error) {
	parts := strings.Split(strings.ToLower(strings.ReplaceAll(s, " ", "")), ",")
	slices.Sort(parts)
	switch strings.Join(slices.Compact(parts), ",") {
	case "off", "none":
		return "", nil
	case "metrics":
		return TelemetryMetrics, nil
	case "logs,metrics":
		return TelemetryMetricsLogs, nil
	}
	return "", fmt.Errorf("telemetry mode %q: want off, metrics or metrics,logs", s)
}

// labelName is a Prometheus label name; fieldName a log field's.
var (
	labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
	fieldName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_.-]*$`)
)

// Check checks the setting's parts.
func (t TelemetrySetting) Check() error {
	if t.Mode != "" && t.Mode != TelemetryMetrics && t.Mode != TelemetryMetricsLogs {
		return fmt.Errorf("mode %q: want off, metrics or metrics,logs", t.Mode)
	}
	for _, l := range t.RedactLabels {
		if !labelName.MatchString(l) {
			return fmt.Errorf("redact-label %q: not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)", l)
		}
	}
	for _, f := range t.RedactFields {
		if !fieldName.MatchString(f) {
			return fmt.Errorf("redact-field %q: not a field name (letters, digits, _ . -)", f)
		}
	}
	_, err := t.DropPatterns()
	return err
}

// DropPatterns compiles DropMetrics, each anchored to match a whole name.
func (t TelemetrySetting) DropPatterns() ([]*regexp.Regexp, error) {
	var out []*regexp.Regexp
	for _, p := range t.DropMetrics {
		re, err := regexp.Compile("^(?:" + p + ")$")
		if err != nil {
			return nil, fmt.Errorf("drop-metric %q: %w", p, err)
		}
		out = append(out, re)
	}
	return out, nil
}

// String describes the setting in one line.
func (t TelemetrySetting) String() string {
	s := t.mode()
	if len(t.RedactLabels) > 0 {
		s += "; labels removed: " + strings.Join(t.RedactLabels, ", ")
	}
	if len(t.RedactFields) > 0 {
		s += "; log fields redacted: " + strings.Join(t.RedactFields, ", ")
	}
	if len(t.DropMetrics) > 0 {
		s += "; metrics dropped: " + strings.Join(t.DropMetrics, ", ")
	}
	return s
}
