package telemetry

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/permissions"
)

// BenchmarkParseMetrics parses a scrape of 1000 counter series and a
// 10-bucket histogram of 100 series, removing a label and dropping a
// metric: the agent's cost per scrape.
func BenchmarkParseMetrics(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("# TYPE requests_total counter\n")
	for i := range 1000 {
		fmt.Fprintf(&sb, "requests_total{route=\"/r%d\",code=\"200\",customer_email=\"u%d@example.com\"} %d\n", i, i, i*7)
	}
	sb.WriteString("# TYPE latency_seconds histogram\n")
	for i := range 100 {
		for _, le := range []string{"0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "+Inf"} {
			fmt.Fprintf(&sb, "latency_seconds_bucket{route=\"/r%d\",le=%q} %d\n", i, le, i)
		}
		fmt.Fprintf(&sb, "latency_seconds_sum{route=\"/r%d\"} 1.5\nlatency_seconds_count{route=\"/r%d\"} %d\n", i, i, i)
	}
	sb.WriteString("# TYPE go_goroutines gauge\ngo_goroutines 12\n")
	text := sb.String()
	r, err := NewRules(permissions.TelemetrySetting{Mode: "metrics", RedactLabels: []string{"customer_email"}, DropMetrics: []string{"go_.*"}})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		ss, err := ParseMetrics("api", strings.NewReader(text), now, r)
		if err != nil || len(ss) != 2200 {
			b.Fatalf("%d samples, %v", len(ss), err)
		}
	}
}
