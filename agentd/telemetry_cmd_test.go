package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/permissions"
)

// agentd telemetry shows off by default, sets each mode with its rules
// into the signed permissions.json, keeps the rules of a kind not given,
// refuses a bad mode or rule naming it, and refuses to build on a file
// changed by hand.
func TestTelemetryCmd(t *testing.T) {
	state := t.TempDir()
	imsdPub, _, _ := ed25519.GenerateKey(rand.Reader)
	agentKey, _ := identity.NewKey()
	if err := identity.Save(state, identity.Identity{AgentID: "agt_test", PrivateKey: agentKey, IMSDKeys: []ed25519.PublicKey{imsdPub}}); err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC) }
	cmd := func(args ...string) (int, string) {
		var out bytes.Buffer
		code := telemetryCmd(append([]string{"--state-dir", state}, args...), &out, &out, now)
		return code, out.String()
	}
	if code, out := cmd("show"); code != 0 || !strings.Contains(out, ": off\n") || !strings.Contains(out, "metric labels removed: none") {
		t.Fatalf("show: %d %s", code, out)
	}
	if code, out := cmd("set", "metrics", "--redact-label", "email", "--redact-label", "user_id", "--drop-metric", "go_.*"); code != 0 ||
		!strings.Contains(out, ": metrics\n") || !strings.Contains(out, "email, user_id") || !strings.Contains(out, "go_.*") {
		t.Fatalf("set metrics: %d %s", code, out)
	}
	if code, out := cmd("set", "logs,metrics", "--redact-field", "password"); code != 0 || !strings.Contains(out, ": metrics,logs\n") ||
		!strings.Contains(out, "email, user_id") || !strings.Contains(out, "log fields redacted:   password") {
		t.Fatalf("set metrics,logs: %d %s", code, out)
	}
	st, err := permissions.Load(state)
	if err != nil || !st.Telemetry.Logs() || st.Telemetry.RedactFields[0] != "password" || st.ChangedBy == "" {
		t.Fatalf("stored: %+v %v", st, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"set", "logs"}, `telemetry mode "logs": want off, metrics or metrics,logs`},
		{[]string{"set", "metrics", "--redact-label", "a-b"}, `--redact-label "a-b": not a Prometheus label name`},
		{[]string{"set", "metrics", "--drop-metric", "go_("}, `--drop-metric "go_(":`},
		{[]string{"set"}, "unknown command"},
		{[]string{"show", "--no-rules"}, "unknown command"},
	} {
		if code, out := cmd(c.args...); code != 2 || !strings.Contains(out, c.want) {
			t.Errorf("%v: %d %s; want 2 and %q", c.args, code, out, c.want)
		}
	}
	if code, out := cmd("set", "off", "--no-rules"); code != 0 || !strings.Contains(out, ": off\n") || !strings.Contains(out, "metrics dropped:       none") {
		t.Fatalf("set off: %d %s", code, out)
	}
	// A setting turned on by hand is refused, and not built upon.
	b, _ := os.ReadFile(permissions.Path(state))
	os.WriteFile(permissions.Path(state), bytes.Replace(b, []byte(`"provision": true`), []byte(`"provision": true, "telemetry": {"mode": "metrics,logs"}`), 1), 0o600)
	if code, out := cmd("show"); code != 1 || !strings.Contains(out, "signature does not verify") {
		t.Fatalf("show of a hand-edited file: %d %s", code, out)
	}
	if code, out := cmd("set", "metrics"); code != 1 || !strings.Contains(out, "signature does not verify") {
		t.Fatalf("set on a hand-edited file: %d %s", code, out)
	}
}
