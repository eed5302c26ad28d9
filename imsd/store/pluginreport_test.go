package store_test

import (
	"context"
	"path/filepath"
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
	if err := s.SetAgentPlugins(ctx, "nope", r, t0); err == nil {
		t.Fatal("an unknown agent's report was recorded")
	}
}
