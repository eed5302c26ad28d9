package telemetry

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/permissions"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// The vendor's telemetry declaration names the metrics URLs the agent
// scrapes from the customer's network, outside any sandbox; a
// compromised imsd writes it. The cloud's instance metadata service (the
// machine's credentials) is never scraped: named directly, in another
// address form, or reached by a redirect from an endpoint that is
// allowed. A metrics endpoint on this machine still is.
func TestCollectorNeverScrapesTheMetadataService(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "app_up 1")
	}))
	defer ok.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/iam/security-credentials/", http.StatusFound)
	}))
	defer redirect.Close()
	var logs bytes.Buffer
	setting := permissions.TelemetrySetting{Mode: "metrics"}
	c := &Collector{Setting: func() (permissions.TelemetrySetting, error) { return setting, nil },
		Log: slog.New(slog.NewTextHandler(&logs, nil)), Now: time.Now}
	c.SetConfig(&agentv1.TelemetryConfig{Metrics: []*agentv1.MetricsSource{
		{Name: "imds", Url: "http://169.254.169.254/latest/meta-data/iam/security-credentials/", IntervalMs: 1000},
		{Name: "imds6", Url: "http://[::ffff:169.254.169.254]/latest/meta-data/", IntervalMs: 1000},
		{Name: "ecs", Url: "http://169.254.170.2/v2/credentials/x", IntervalMs: 1000},
		{Name: "redirect", Url: redirect.URL + "/metrics", IntervalMs: 1000},
		{Name: "app", Url: ok.URL + "/metrics", IntervalMs: 1000},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.Collect(ctx)
	var names []string
	select {
	case b := <-c.Batches():
		for _, s := range b.Samples {
			names = append(names, s.Source+":"+s.Name)
		}
	default:
	}
	if strings.Join(names, ",") != "app:app_up" {
		t.Errorf("samples %q, want app_up from the app's endpoint only", names)
	}
	for _, src := range []string{"metrics:imds", "metrics:imds6", "metrics:ecs", "metrics:redirect"} {
		if !lineWith(logs.String(), "source="+src, "the agent never scrapes metrics there") {
			t.Errorf("no refusal of %s in the agent's log:\n%s", src, logs.String())
		}
	}
}

func lineWith(text string, parts ...string) bool {
	for _, l := range strings.Split(text, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			return true
		}
	}
	return false
}
