package telemetry

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/permissions"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

const scrape = `# HELP http_requests_total Requests.
# TYPE http_requests_total counter
http_requests_total{code="200",customer_email="a@example.com"} 1027 1700000000000
http_requests_total{code="500",customer_email="b@example.com"} 3
# TYPE queue_depth gauge
queue_depth 7
# TYPE go_goroutines gauge
go_goroutines 12
# TYPE latency_seconds histogram
latency_seconds_bucket{le="0.1"} 5
latency_seconds_bucket{le="+Inf"} 8
latency_seconds_sum 1.5
latency_seconds_count 8
# TYPE rpc summary
rpc{quantile="0.5"} 0.2
rpc_sum 4
rpc_count 20
`

func rules(t *testing.T, s permissions.TelemetrySetting) *Rules {
	t.Helper()
	r, err := NewRules(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func sampleText(ss []*agentv1.MetricSample) string {
	var b strings.Builder
	for _, s := range ss {
		fmt.Fprintf(&b, "%s %v %v\n", s.Name, s.Labels, s.Value)
	}
	return b.String()
}

func TestParseMetrics(t *testing.T) {
	now := time.Unix(1800000000, 0)
	r := rules(t, permissions.TelemetrySetting{Mode: "metrics", RedactLabels: []string{"customer_email"}, DropMetrics: []string{"go_.*"}})
	ss, err := ParseMetrics("api", strings.NewReader(scrape), now, r)
	if err != nil {
		t.Fatal(err)
	}
	want := `http_requests_total map[code:200] 1027
http_requests_total map[code:500] 3
latency_seconds_bucket map[le:0.1] 5
latency_seconds_bucket map[le:+Inf] 8
latency_seconds_sum map[] 1.5
latency_seconds_count map[] 8
queue_depth map[] 7
rpc map[quantile:0.5] 0.2
rpc_sum map[] 4
rpc_count map[] 20
`
	if got := sampleText(ss); got != want {
		t.Errorf("samples:\n%s\nwant:\n%s", got, want)
	}
	if ss[0].Time.AsTime().UnixMilli() != 1700000000000 || !ss[1].Time.AsTime().Equal(now) || ss[0].Source != "api" {
		t.Errorf("times/source: %v %v %q", ss[0].Time.AsTime(), ss[1].Time.AsTime(), ss[0].Source)
	}
	// Dropping a histogram's series by its own name.
	r = rules(t, permissions.TelemetrySetting{Mode: "metrics", DropMetrics: []string{"latency_seconds_bucket"}})
	ss, _ = ParseMetrics("api", strings.NewReader(scrape), now, r)
	if strings.Contains(sampleText(ss), "latency_seconds_bucket") || !strings.Contains(sampleText(ss), "latency_seconds_sum") {
		t.Errorf("dropping a _bucket series:\n%s", sampleText(ss))
	}
	if _, err := ParseMetrics("api", strings.NewReader("this is { not metrics\n"), now, r); err == nil {
		t.Error("garbage parsed")
	}
	big := strings.NewReader("# TYPE x gauge\n" + strings.Repeat("x 1\n", MaxScrapeBytes/4+1))
	if _, err := ParseMetrics("api", big, now, r); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("oversized scrape: %v", err)
	}
}

func TestRedactLine(t *testing.T) {
	r := rules(t, permissions.TelemetrySetting{Mode: "metrics,logs", RedactFields: []string{"email", "token"}})
	for in, want := range map[string]string{
		`{"msg":"login","email":"a@example.com","user":{"token":"s3cr3t","id":4}}`: `{"email":"[redacted]","msg":"login","user":{"id":4,"token":"[redacted]"}}`,
		`level=info msg="login" email=a@example.com token="x y" id=4`:              `level=info msg="login" email=[redacted] token=[redacted] id=4`,
		`login for email: a@example.com, ok`:                                       `login for email: [redacted], ok`,
		`no fields here; emails=3`:                                                 `no fields here; emails=3`,
		`{"msg":"nothing to redact"}`:                                              `{"msg":"nothing to redact"}`,
	} {
		if got := r.Line(in); got != want {
			t.Errorf("%s\n got %s\nwant %s", in, got, want)
		}
	}
}

// The collector scrapes a loopback endpoint and reads a log file only as
// the setting allows: off reads and queues nothing, metrics no lines,
// and lines written while logs were off are never sent.
func TestCollector(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, scrape) }))
	defer srv.Close()
	dir := t.TempDir()
	logFile := filepath.Join(dir, "app.log")
	os.WriteFile(logFile, []byte("before=1\n"), 0o644)
	setting := permissions.TelemetrySetting{}
	now := time.Unix(1800000000, 0)
	c := &Collector{Setting: func() (permissions.TelemetrySetting, error) { return setting, nil }, Now: func() time.Time { return now }}
	c.SetConfig(&agentv1.TelemetryConfig{
		Metrics: []*agentv1.MetricsSource{{Name: "api", Url: srv.URL, IntervalMs: 1000}},
		Logs:    []*agentv1.LogSource{{Name: "app", Path: filepath.Join(dir, "*.log"), IntervalMs: 1000}},
	})
	ctx := context.Background()
	next := func() *agentv1.TelemetryBatch {
		now = now.Add(time.Second)
		c.Collect(ctx)
		select {
		case b := <-c.Batches():
			return b
		default:
			return nil
		}
	}
	if b := next(); b != nil {
		t.Fatalf("off: %v", b)
	}
	setting = permissions.TelemetrySetting{Mode: "metrics", RedactLabels: []string{"customer_email"}}
	appendLine(t, logFile, "during_metrics=1\n")
	b := next()
	if b == nil || len(b.Samples) != 11 || len(b.Lines) != 0 || strings.Contains(sampleText(b.Samples), "customer_email") {
		t.Fatalf("metrics: %v", b)
	}
	setting = permissions.TelemetrySetting{Mode: "metrics,logs", RedactFields: []string{"secret"}}
	appendLine(t, logFile, "secret=hunter2 n=1\npartial")
	b = next()
	if b == nil || len(b.Lines) != 1 || b.Lines[0].Text != "secret=[redacted] n=1" || b.Lines[0].Source != "app" {
		t.Fatalf("metrics,logs: %v", b.GetLines())
	}
	appendLine(t, logFile, " line\n")
	if b = next(); len(b.GetLines()) != 1 || b.Lines[0].Text != "partial line" {
		t.Fatalf("the rest of a partial line: %v", b.GetLines())
	}
	// Bounded: a full queue drops batches and counts them.
	for range QueueBatches + 2 {
		now = now.Add(time.Second)
		c.Collect(ctx)
	}
	if s, _ := c.Dropped(); s == 0 {
		t.Errorf("no samples counted as dropped with the queue full")
	}
}

func appendLine(t *testing.T, path, s string) {
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
