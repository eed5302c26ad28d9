package store_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/store/pgtest"
)

// An agent's plugin releases are recorded whole and read back with the
// agent (nil until it reports any), on both databases.
func TestAgentPluginReport(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testAgentPluginReport(t, filepath.Join(t.TempDir(), "s.db")) })
	t.Run("postgres", func(t *testing.T) { testAgentPluginReport(t, pgtest.Start(t)) })
}

func testAgentPluginReport(t *testing.T, dsn string) {
	ctx := context.Background()
	s, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.CreateApp(ctx, store.App{ID: "app", Name: "app", CreatedAt: t0}))
	must(s.CreateInstall(ctx, store.Install{ID: "inst", AppID: "app", Name: "inst", CreatedAt: t0},
		store.EnrollmentToken{Hash: "h", ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}))
	_, err = s.Enroll(ctx, "h", store.Agent{ID: "ag", PublicKey: []byte("k")}, t0)
	must(err)
	if a, err := s.GetAgent(ctx, "ag"); err != nil || a.Plugins != nil {
		t.Fatalf("before a report: %v %+v", err, a.Plugins)
	}
	r := store.PluginReport{Releases: []store.PluginRelease{
		{Type: "greeting", Release: "reg/plugins/greeting@sha256:9a", Version: "0.2.0", Verdict: "verified", KeyID: "3b1f", CheckedAt: t0},
		{Type: "cache", Release: "reg/plugins/cache@sha256:77", Verdict: "refused", Reason: "no signature by a trusted key", CheckedAt: t0},
	}}
	must(s.SetAgentPlugins(ctx, "ag", r, t0.Add(time.Minute)))
	as, err := s.AgentsForInstall(ctx, "inst")
	must(err)
	if len(as) != 1 || as[0].Plugins == nil || !as[0].Plugins.SameReleases(r) || !as[0].Plugins.ReportedAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("read back: %+v", as)
	}
	// The refusal is in the install's chain, once, as a job's refused
	// artifact is (supply_chain*), naming the type, release, version,
	// digest, rule and reason.
	audited := func() []string {
		t.Helper()
		evs, err := s.ListAuditEvents(ctx, store.AuditFilter{Chain: "inst", OneChain: true})
		must(err)
		var out []string
		for _, e := range evs {
			if strings.HasPrefix(e.Kind, "agent.plugin_") {
				out = append(out, fmt.Sprintf("%s %s %s %s %s %s %s %s %s", e.Kind, e.Actor, e.Subject, e.Data["component_type"], e.Data["version"],
					e.Data["supply_chain"], e.Data["supply_chain_artifact"], e.Data["supply_chain_failed"], e.Data["key_id"]))
			}
		}
		return out
	}
	refused := "agent.plugin_refused agent:ag plugin:cache cache  refused reg/plugins/cache@sha256:77 sha256:77 release: no signature by a trusted key "
	if got := audited(); !slices.Equal(got, []string{refused}) {
		t.Fatalf("audited:\n%q\nwant\n%q", got, refused)
	}
	must(s.SetAgentPlugins(ctx, "ag", r, t0.Add(2*time.Minute)))
	if got := audited(); len(got) != 1 {
		t.Fatalf("the same refusal reported again was audited again: %q", got)
	}
	if err := s.SetAgentPlugins(ctx, "nope", r, t0); err == nil {
		t.Fatal("an unknown agent's report was recorded")
	}

	// The history: each release checked since the last report, once;
	// newest first.
	r2 := store.PluginReport{Releases: []store.PluginRelease{r.Releases[0],
		{Type: "cache", Release: "reg/plugins/cache@sha256:88", Version: "0.3.1", Verdict: "verified", KeyID: "3b1f", CheckedAt: t0.Add(time.Hour)},
		{Type: "queue", Release: "reg/plugins/queue@sha256:55"}, // pinned, not installed: no verification
	}}
	must(s.SetAgentPlugins(ctx, "ag", r2, t0.Add(2*time.Hour)))
	h, err := s.VerificationHistory(ctx, "inst", 10)
	must(err)
	var got []string
	for _, v := range h {
		got = append(got, fmt.Sprintf("%s/%s %s %s %s %s %v %s", v.Component, v.ComponentType, v.AgentID, v.Artifact, v.Version, v.Verdict, v.Failed, v.VerifiedAt.Sub(t0)))
	}
	want := []string{
		"/cache ag reg/plugins/cache@sha256:88 0.3.1 verified [] 1h0m0s",
		"/cache ag reg/plugins/cache@sha256:77  refused [no signature by a trusted key] 0s",
		"/greeting ag reg/plugins/greeting@sha256:9a 0.2.0 verified [] 0s",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("history:\n%q\nwant\n%q", got, want)
	}

	// At most HistoryPerArtifact of one type: the newest.
	for i := range store.HistoryPerArtifact + 5 {
		at := t0.Add(time.Duration(3+i) * time.Hour)
		must(s.SetAgentPlugins(ctx, "ag", store.PluginReport{Releases: []store.PluginRelease{
			{Type: "cache", Release: "reg/plugins/cache@sha256:88", Verdict: "verified", CheckedAt: at}}}, at))
	}
	h, err = s.VerificationHistory(ctx, "inst", 1000)
	must(err)
	n := 0
	for _, v := range h {
		if v.ComponentType == "cache" {
			n++
		}
	}
	if n != store.HistoryPerArtifact || h[0].VerifiedAt.Sub(t0) != time.Duration(3+store.HistoryPerArtifact+4)*time.Hour {
		t.Fatalf("kept %d of cache, newest at %v", n, h[0].VerifiedAt.Sub(t0))
	}
	if got := audited(); len(got) != 1 {
		t.Fatalf("releases verified (none refused before) were audited: %q", got)
	}

	// A release refused, then installed after all: both audited.
	at := t0.Add(100 * time.Hour)
	rel := store.PluginRelease{Type: "cache", Release: "reg/plugins/cache@sha256:99", Version: "0.4.0", Verdict: "refused", Reason: "its binary's checksum is not the pin's", CheckedAt: at}
	must(s.SetAgentPlugins(ctx, "ag", store.PluginReport{Releases: []store.PluginRelease{rel}}, at))
	rel.Verdict, rel.Reason, rel.KeyID, rel.CheckedAt = "verified", "", "3b1f", at.Add(time.Hour)
	must(s.SetAgentPlugins(ctx, "ag", store.PluginReport{Releases: []store.PluginRelease{rel}}, at.Add(time.Hour)))
	want = []string{refused,
		"agent.plugin_refused agent:ag plugin:cache cache 0.4.0 refused reg/plugins/cache@sha256:99 sha256:99 release: its binary's checksum is not the pin's ",
		"agent.plugin_verified agent:ag plugin:cache cache 0.4.0 verified reg/plugins/cache@sha256:99 sha256:99  3b1f"}
	if got := audited(); !slices.Equal(got, want) {
		t.Fatalf("audited:\n%q\nwant\n%q", got, want)
	}
}
