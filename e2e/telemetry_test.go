package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/agentd/ledger"
	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// Telemetry the customer controls (issue 32): an app declares a metrics
// endpoint (a loopback server here) and a log file. With the customer's
// setting off (the default) the agent scrapes and sends nothing (the
// egress ledger shows no telemetry); with metrics, the samples reach imsd
// with the label the customer removes gone, and no log line; with
// metrics,logs, the lines come too, the field the customer redacts
// masked. Each change is in the agent's journal and imsd's audit chain.
func TestTelemetryTheCustomerControls(t *testing.T) {
	skipShort(t)
	var scrapes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scrapes.Add(1)
		fmt.Fprint(w, "# TYPE orders_total counter\norders_total{region=\"eu\",customer_email=\"a@example.com\"} 42\n# TYPE queue_depth gauge\nqueue_depth 3\n")
	}))
	defer srv.Close()
	logDir := t.TempDir()
	logFile := filepath.Join(logDir, "app.log")
	if err := os.WriteFile(logFile, []byte("secret=before-any-setting n=0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	pushed := cli.PushApp(map[string]string{
		"app.toml": "name = \"telem\"\n",
		"components/a.toml": `type = "action"
[config]
steps = [{ name = "a", script = "true" }]
`,
		"telemetry.toml": fmt.Sprintf(`[[metrics]]
name = "api"
url = %q
interval = "1s"

[[logs]]
name = "app"
path = %q
interval = "1s"
`, srv.URL+"/metrics", filepath.Join(logDir, "*.log")),
		"installs/acme.toml": "",
	})
	state := t.TempDir()
	cluster.StartAgent(t, ims.URL(), pushed.EnrollToken(t), state)
	agentd := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), append(args, "--state-dir", state)...).CombinedOutput()
		if err != nil {
			t.Fatalf("agentd %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	ledgerKinds := func() map[string]int {
		out := map[string]int{}
		for _, line := range strings.Split(strings.TrimSpace(agentd("egress", "list", "--json")), "\n") {
			var e ledger.Entry
			if line != "" && json.Unmarshal([]byte(line), &e) == nil {
				out[e.Kind]++
			}
		}
		return out
	}
	telemetry := func() *imsv1.GetTelemetryResponse {
		res, err := ims.Admin().GetTelemetry(context.Background(), connect.NewRequest(&imsv1.GetTelemetryRequest{Install: "acme"}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Msg
	}

	// Off: several heartbeats pass, and nothing was scraped or sent.
	if out := agentd("telemetry", "show"); !strings.Contains(out, ": off") {
		t.Fatalf("agentd telemetry show:\n%s", out)
	}
	cluster.Eventually(t, 20*time.Second, "five heartbeats in the ledger", func() bool { return ledgerKinds()["heartbeat"] >= 5 })
	if k := ledgerKinds(); k["telemetry"] != 0 || scrapes.Load() != 0 {
		t.Fatalf("telemetry off, but %d telemetry messages and %d scrapes", k["telemetry"], scrapes.Load())
	}
	if m := telemetry(); len(m.Samples) != 0 || len(m.Lines) != 0 {
		t.Fatalf("telemetry off, but imsd holds %v", m)
	}

	// Metrics: samples arrive, without customer_email; no log line.
	if out := agentd("telemetry", "set", "metrics", "--redact-label", "customer_email", "--redact-field", "secret"); !strings.Contains(out, ": metrics\n") {
		t.Fatalf("agentd telemetry set metrics:\n%s", out)
	}
	cluster.Eventually(t, 20*time.Second, "the samples at imsd", func() bool { return len(telemetry().Samples) == 2 })
	m := telemetry()
	if m.Setting != "metrics" || m.Samples[0].Name != "orders_total" || m.Samples[0].Value != 42 || m.Samples[0].Labels["region"] != "eu" ||
		m.Samples[0].Labels["customer_email"] != "" || m.Samples[0].Source != "api" {
		t.Fatalf("telemetry under metrics: %v", m)
	}
	if out := cli.Run(0, "telemetry", "metrics", "acme"); !strings.Contains(out, `orders_total{region="eu",source="api"} 42`) || strings.Contains(out, "example.com") {
		t.Fatalf("byoc telemetry metrics:\n%s", out)
	}
	if k := ledgerKinds(); k["telemetry"] == 0 {
		t.Fatalf("telemetry sent but not in the egress ledger: %v", k)
	}
	appendFile(t, logFile, "secret=while-metrics n=1\n")
	// A further batch (a scrape after the line was written) carries no line.
	n := scrapes.Load()
	cluster.Eventually(t, 20*time.Second, "two more scrapes", func() bool { return scrapes.Load() >= n+2 })
	if m := telemetry(); len(m.Lines) != 0 {
		t.Fatalf("log lines forwarded under metrics: %v", m.Lines)
	}

	// Metrics and logs: new lines arrive, secret masked; lines written
	// while logs were off never leave.
	agentd("telemetry", "set", "metrics,logs")
	cluster.Eventually(t, 20*time.Second, "imsd sees metrics,logs", func() bool { return telemetry().Setting == "metrics,logs" })
	appendFile(t, logFile, `{"msg":"order placed","secret":"hunter2","order":7}`+"\n")
	var lines []*imsv1.TelemetryLogLine
	cluster.Eventually(t, 20*time.Second, "the log line at imsd", func() bool { lines = telemetry().Lines; return len(lines) > 0 })
	if len(lines) != 1 || lines[0].Text != `{"msg":"order placed","order":7,"secret":"[redacted]"}` || lines[0].Source != "app" {
		t.Fatalf("lines under metrics,logs: %v", lines)
	}
	if out := cli.Run(0, "telemetry", "logs", "acme"); !strings.Contains(out, `app {"msg":"order placed","order":7,"secret":"[redacted]"}`) || strings.Contains(out, "hunter2") {
		t.Fatalf("byoc telemetry logs:\n%s", out)
	}

	// Audited: the agent's journal and imsd's chain.
	journal, err := os.ReadFile(filepath.Join(state, "audit", "agent.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(journal), `"telemetry.changed"`); n != 2 {
		t.Errorf("the agent's journal holds %d telemetry.changed records, want 2:\n%s", n, journal)
	}
	evs, err := ims.Admin().ListAuditEvents(context.Background(), connect.NewRequest(&imsv1.ListAuditEventsRequest{Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	var modes []string
	for _, e := range evs.Msg.Events {
		if e.Kind == "agent.permissions_changed" && strings.Contains(e.Data, `telemetry`) {
			modes = append(modes, map[bool]string{true: "metrics,logs", false: "metrics"}[strings.Contains(e.Data, `metrics,logs`)])
		}
	}
	if strings.Join(modes, " ") != "metrics metrics,logs" {
		t.Errorf("imsd's chain records the telemetry setting as %v, want metrics then metrics,logs", modes)
	}
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}
