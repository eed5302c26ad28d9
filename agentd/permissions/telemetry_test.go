package permissions

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestParseTelemetryMode(t *testing.T) {
	for in, want := range map[string]string{"off": "", "none": "", "metrics": TelemetryMetrics, "metrics,logs": TelemetryMetricsLogs,
		"logs,metrics": TelemetryMetricsLogs, "Metrics, Logs": TelemetryMetricsLogs} {
		if got, err := ParseTelemetryMode(in); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"logs", "all", "", "metrics,traces"} {
		if _, err := ParseTelemetryMode(in); err == nil || !strings.Contains(err.Error(), "want off, metrics or metrics,logs") {
			t.Errorf("%q: %v, want refused", in, err)
		}
	}
	for _, s := range []TelemetrySetting{{Mode: "logs"}, {RedactLabels: []string{"a-b"}}, {RedactFields: []string{"a b"}}, {DropMetrics: []string{"go_("}}} {
		if err := s.Check(); err == nil {
			t.Errorf("%+v accepted", s)
		}
	}
}

// The telemetry setting is signed with the permission modes: the
// default is off, a change is kept signed, and a file whose setting was
// edited by hand (turned from metrics to metrics,logs, or a redaction
// rule removed) is refused.
func TestTelemetrySettingIsSigned(t *testing.T) {
	dir, _ := enrolled(t, "agt_1")
	if st, err := Load(dir); err != nil || st.Telemetry.Metrics() || st.Telemetry.ModeName() != "off" {
		t.Fatalf("default: %+v, %v; want off", st.Telemetry, err)
	}
	mustUpdate(t, dir, func(s *State) {
		s.Telemetry = TelemetrySetting{Mode: TelemetryMetrics, RedactLabels: []string{"customer_email"}}
	})
	st, err := Load(dir)
	if err != nil || !st.Telemetry.Metrics() || st.Telemetry.Logs() || st.Telemetry.RedactLabels[0] != "customer_email" {
		t.Fatalf("signed: %+v, %v", st.Telemetry, err)
	}
	b, err := os.ReadFile(Path(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, edit := range [][2]string{
		{`"mode": "metrics"`, `"mode": "metrics,logs"`},
		{`"redact_labels": [
        "customer_email"
      ]`, `"redact_labels": []`},
	} {
		edited := bytes.Replace(b, []byte(edit[0]), []byte(edit[1]), 1)
		if bytes.Equal(edited, b) {
			t.Fatalf("no %s in\n%s", edit[0], b)
		}
		if err := os.WriteFile(Path(dir), edited, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err = Load(dir)
		refused(t, err, "signature does not verify")
	}
}
