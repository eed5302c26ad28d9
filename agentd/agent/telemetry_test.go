package agent

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/agentd/permissions"
)

// telemetryChanges are the journal's telemetry.changed records, as
// "from>mode".
func telemetryChanges(t *testing.T, dir string) []string {
	t.Helper()
	rs, err := auditlog.ReadFile(filepath.Join(auditlog.Dir(dir), auditlog.AgentFile))
	if err != nil {
		return nil
	}
	var out []string
	for _, r := range rs {
		if r.Kind == KindTelemetryChanged {
			from, mode := between(r.Data, `"from":"`), between(r.Data, `"mode":"`)
			out = append(out, from+">"+mode)
		}
	}
	return out
}

func between(s, start string) string {
	_, after, _ := strings.Cut(s, start)
	v, _, _ := strings.Cut(after, `"`)
	return v
}

// A change of the customer's telemetry setting is journalled when the
// running agent sees it, and one made while the agent was stopped when
// it starts again (against the journal's last record); a restart without
// a change journals nothing.
func TestTelemetryChangesAreJournalled(t *testing.T) {
	dir := t.TempDir()
	f := &fakeIMS{}
	a, stop := startFakeIn(t, f, &runRecorder{}, dir, nil)
	setPermissions(t, a, func(s *permissions.State) {
		s.Telemetry = permissions.TelemetrySetting{Mode: permissions.TelemetryMetrics}
	})
	eventually(t, "the change journalled", func() bool { return strings.Join(telemetryChanges(t, dir), " ") == "off>metrics" })
	stop()
	if _, err := permissions.Update(dir, a.now(), "test", func(s *permissions.State) {
		s.Telemetry = permissions.TelemetrySetting{Mode: permissions.TelemetryMetricsLogs, DropMetrics: []string{"go_.*", "a b"}}
	}); err != nil {
		t.Fatal(err)
	}
	_, stop = startFakeIn(t, f, &runRecorder{}, dir, nil)
	eventually(t, "the change made while stopped journalled", func() bool {
		return strings.Join(telemetryChanges(t, dir), " ") == "off>metrics metrics>metrics,logs"
	})
	stop()
	b, stop := startFakeIn(t, f, &runRecorder{}, dir, nil)
	defer stop()
	b.permissions() // the first look, where a change would be journalled
	if got := strings.Join(telemetryChanges(t, dir), " "); got != "off>metrics metrics>metrics,logs" {
		t.Errorf("after a restart without a change: %s", got)
	}
}
