package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/internal/plugindist"
	"github.com/byoc-dev/byoc/plugins/bundle"
)

// fakeBinary is a program that prints its version as agentd and
// byoc-plugins do (agentd 1.5.0 (...)).
func fakeBinary(name, v string) []byte {
	return []byte("#!/bin/sh\necho '" + name + " " + v + " (test build)'\n")
}

// The whole of agentd update against a real registry: a release that is
// unsigned, signed by a key the agent does not trust, or forbidden by the
// policy (pin, range, manual for an automatic update, closed window) is
// refused and noted for the journal, nothing swapped; an allowed one is
// copied into the install registry, verified and swapped (old binaries
// kept); the new version confirms it once connected; a new version that
// does not reconnect by the deadline, or crash-loops, is rolled back to
// the old binaries, which are executed in its place.
func TestAgentUpdate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a registry")
	}
	ctx := t.Context()
	vendor, repo := agentReleaseRepo(t)
	imsdPub, imsdKey, _ := ed25519.GenerateKey(rand.Reader)
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	plat := runtime.GOOS + "/" + runtime.GOARCH
	publish := func(v string, key ed25519.PrivateKey) string {
		md, err := plugindist.PushAgent(ctx, repo, v, plugindist.AgentRelease{Version: v, Binaries: map[string]map[string][]byte{
			plat: {"agentd": fakeBinary("agentd", v), "byoc-plugins": fakeBinary(bundle.Binary, v)}}})
		if err != nil {
			t.Fatal(err)
		}
		if key != nil {
			if _, err := plugindist.Sign(ctx, repo, md, plugindist.AgentType, v, key); err != nil {
				t.Fatal(err)
			}
		}
		return "oci://" + vendor.Host + "/byoc/agent@" + md.Digest.String()
	}

	state, bin := t.TempDir(), t.TempDir()
	agentKey, _ := identity.NewKey()
	if err := identity.Save(state, identity.Identity{AgentID: "agt_test", PrivateKey: agentKey, IMSDKeys: []ed25519.PublicKey{imsdPub}}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"agentd", bundle.Binary} {
		if err := os.WriteFile(filepath.Join(bin, f), fakeBinary(f, "1.4.0"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sunday := time.Date(2026, 11, 29, 4, 0, 0, 0, time.UTC)
	now := sunday
	clock := func() time.Time { return now }
	running := func(f string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(bin, f))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(string(b))[3]
	}
	notes := func() string {
		t.Helper()
		ns, err := takeUpdateNotes(state)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, n := range ns {
			s = append(s, n.Kind+" "+n.Data["reason"])
		}
		return strings.Join(s, "\n")
	}
	cmd := func(args ...string) (int, string) {
		var out bytes.Buffer
		code := updateCmd(ctx, append([]string{"--state-dir", state}, args...), &out, &out, clock)
		return code, out.String()
	}
	apply := func(ref, from string, auto bool) (int, string) {
		var out bytes.Buffer
		u := &updater{stateDir: state, installDir: bin, auto: auto, confirmWithin: time.Minute, platform: plat, now: clock, stdout: &out, version: from}
		if err := u.apply(ctx, ref); err != nil {
			return 1, err.Error()
		}
		return 0, out.String()
	}
	refuses := func(ref string, auto bool, want string) {
		t.Helper()
		if code, out := apply(ref, "1.4.0", auto); code == 0 || !strings.Contains(out, want) {
			t.Fatalf("apply %s: %d %s; want refused: %s", ref, code, out, want)
		}
		if n := notes(); !strings.HasPrefix(n, "agent_update_refused ") || !strings.Contains(n, want) {
			t.Fatalf("notes: %q", n)
		}
		if running("agentd") != "1.4.0" || running(bundle.Binary) != "1.4.0" {
			t.Fatal("a refused update swapped the binaries")
		}
	}

	v150 := publish("1.5.0", imsdKey)
	refuses(publish("1.5.1", nil), false, "no signature by a trusted key")
	if l := loadLastUpdate(state); l == nil || l.Kind != "refused" || l.Cause != causeSignature {
		t.Fatalf("unsigned: last %+v", l)
	}
	// A release whose binaries are not the version it says fails its
	// self-check: failed (not refused), nothing swapped.
	md, err := plugindist.PushAgent(ctx, repo, "1.5.3", plugindist.AgentRelease{Version: "1.5.3", Binaries: map[string]map[string][]byte{
		plat: {"agentd": fakeBinary("agentd", "9.9.9"), "byoc-plugins": fakeBinary(bundle.Binary, "9.9.9")}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plugindist.Sign(ctx, repo, md, plugindist.AgentType, "1.5.3", imsdKey); err != nil {
		t.Fatal(err)
	}
	if code, out := apply("oci://"+vendor.Host+"/byoc/agent@"+md.Digest.String(), "1.4.0", false); code == 0 || !strings.Contains(out, "is not version 1.5.3") {
		t.Fatalf("self-check: %d %s", code, out)
	}
	if l := loadLastUpdate(state); l == nil || l.Kind != "failed" || l.Cause != causeSelfCheck || running("agentd") != "1.4.0" {
		t.Fatalf("self-check: last %+v", l)
	}
	notes()
	refuses(publish("1.5.2", otherKey), false, "(not trusted)")
	if code, out := cmd("policy", "--pin", "1.4.0"); code != 0 || !strings.Contains(out, "pinned to 1.4.0") {
		t.Fatalf("policy --pin: %d %s", code, out)
	}
	refuses(v150, false, "pins version 1.4.0")
	if code, out := cmd("policy", "--manual"); code != 0 || !strings.Contains(out, ": manual") {
		t.Fatalf("policy --manual: %d %s", code, out)
	}
	refuses(v150, true, "the update policy is manual")
	if code, out := cmd("policy", "--allow", ">=1.4 <2", "--window", "Sun 03:00-05:00"); code != 0 ||
		!strings.Contains(out, "versions >=1.4 <2, in the window Sun 03:00-05:00 UTC") || !strings.Contains(out, "Window: open now") {
		t.Fatalf("policy --allow --window: %d %s", code, out)
	}
	if code, out := cmd("policy"); code != 0 || !strings.Contains(out, "versions >=1.4 <2, in the window Sun 03:00-05:00 UTC") {
		t.Fatalf("policy: %d %s", code, out)
	}
	refuses(publish("2.0.0", imsdKey), true, "allows versions >=1.4 <2")
	now = sunday.Add(24 * time.Hour)
	refuses(v150, true, "window Sun 03:00-05:00 UTC is closed")
	now = sunday

	// An offer only the window refuses is deferred, not refused, and
	// applied when the window next opens: here while the test runs (the
	// clock 100 ms before Sunday 03:00).
	offer := func(offerID, ref string) error {
		var out bytes.Buffer
		u := &updater{stateDir: state, installDir: bin, auto: true, confirmWithin: time.Minute, platform: plat, now: clock, stdout: &out,
			version: "1.4.0", offerID: offerID, by: "imsd offer " + offerID}
		if err := u.apply(ctx, ref); err != nil {
			return err
		}
		if !strings.Contains(out.String(), "1.4.0 -> 1.5.0") {
			t.Errorf("apply: %s", out.String())
		}
		return nil
	}
	now = sunday.Add(24 * time.Hour)
	var de deferredError
	if err := offer("uo_1", v150); !errors.As(err, &de) || !de.at.Equal(time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)) {
		t.Fatalf("offer outside the window: %v", err)
	}
	if l := loadLastUpdate(state); l == nil || l.Kind != "deferred" || l.Cause != "window" || l.OfferID != "uo_1" || l.Release != v150 ||
		running("agentd") != "1.4.0" {
		t.Fatalf("deferred: last %+v", l)
	}
	if n := notes(); !strings.HasPrefix(n, "agent_update_deferred the update window Sun 03:00-05:00 UTC is closed") {
		t.Fatalf("notes: %q", n)
	}
	now = de.at.Add(-100 * time.Millisecond)
	applied, stopped := make(chan error, 1), make(chan struct{})
	dctx, stop := context.WithCancel(ctx)
	go func() {
		defer close(stopped)
		runDeferredOffers(dctx, state, make(chan struct{}), clock, func(_ context.Context, offerID, ref string) {
			now = de.at // the timer fired: the window is open
			applied <- offer(offerID, ref)
		}, func() {}, slog.New(slog.DiscardHandler))
	}()
	select {
	case err := <-applied:
		if err != nil {
			t.Fatalf("the deferred offer at the window's opening: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the deferred offer was not applied when the window opened")
	}
	stop()
	<-stopped
	now = sunday
	if running("agentd") != "1.5.0" || running(bundle.Binary) != "1.5.0" || running("agentd.prev") != "1.4.0" {
		t.Fatal("not swapped")
	}
	if n := notes(); !strings.HasPrefix(n, "agent_update_applied") {
		t.Fatalf("notes: %q", n)
	}
	if code, out := apply(v150, "1.5.0", true); code == 0 || !strings.Contains(out, "in progress") {
		t.Fatalf("a second apply during an update: %d %s", code, out)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := updateAtStart(state, "1.5.0", now, log)
	if err != nil || s == nil || s.Starts != 1 {
		t.Fatalf("at start: %+v %v", s, err)
	}
	var noted []string
	note := func(kind, _ string, _ map[string]string) { noted = append(noted, kind) }
	connected := func(context.Context) error { return nil }
	if err := confirmUpdate(ctx, state, s, connected, note, log); err != nil || strings.Join(noted, ",") != "agent_update_confirmed" {
		t.Fatalf("confirm: %v %v", err, noted)
	}
	if _, err := os.Stat(filepath.Join(bin, "agentd.prev")); !os.IsNotExist(err) {
		t.Fatalf("old binaries kept after the confirmation: %v", err)
	}
	if s, err := updateAtStart(state, "1.5.0", now, log); s != nil || err != nil {
		t.Fatalf("a start after the confirmation: %+v %v", s, err)
	}

	// 1.6.0 never reconnects: rolled back at the deadline, 1.5.0 run.
	var execed []string
	realExec := execAgent
	execAgent = func(path string, args []string) error { execed = append(execed, path); return nil }
	t.Cleanup(func() { execAgent = realExec })
	v160 := publish("1.6.0", imsdKey)
	if code, out := apply(v160, "1.5.0", true); code != 0 {
		t.Fatalf("apply 1.6.0: %s", out)
	}
	notes()
	if s, err = updateAtStart(state, "1.6.0", now, log); err != nil || s == nil {
		t.Fatalf("1.6.0 at start: %v", err)
	}
	never := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	s.FirstStart = time.Now().Add(-s.ConfirmWithin + 50*time.Millisecond)
	if err := confirmUpdate(ctx, state, s, never, note, log); err == nil || len(execed) != 1 || execed[0] != filepath.Join(bin, "agentd") {
		t.Fatalf("rollback: %v, executed %v", err, execed)
	}
	if running("agentd") != "1.5.0" || running(bundle.Binary) != "1.5.0" {
		t.Fatal("not rolled back")
	}
	if n := notes(); !strings.Contains(n, "agent_update_rolled_back did not reconnect within 1m0s") {
		t.Fatalf("notes: %q", n)
	}

	// 1.6.0 crash-loops: rolled back at its fourth start.
	if code, out := apply(v160, "1.5.0", true); code != 0 {
		t.Fatalf("apply 1.6.0 again: %s", out)
	}
	for i := 1; i <= maxUpdateStarts; i++ {
		if s, err := updateAtStart(state, "1.6.0", now, log); err != nil || s == nil || s.Starts != i {
			t.Fatalf("start %d: %+v %v", i, s, err)
		}
	}
	if _, err := updateAtStart(state, "1.6.0", now, log); err == nil || len(execed) != 2 {
		t.Fatalf("fourth start: %v %v", err, execed)
	}
	if running("agentd") != "1.5.0" {
		t.Fatal("not rolled back after the crash loop")
	}
	if n := notes(); !strings.Contains(n, "started 3 times without reconnecting") {
		t.Fatalf("notes: %q", n)
	}
	if code, out := cmd("status"); code != 0 || !strings.Contains(out, "No update in progress") {
		t.Fatalf("status: %s", out)
	}
}

// agentReleaseRepo starts a vendor registry and opens its byoc/agent
// repository, where the update tests publish agent releases.
func agentReleaseRepo(t *testing.T) (*ocitest.Registry, *ocicopy.Repo) {
	t.Helper()
	vendor := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	reg, err := ocicopy.ParseRegistry(vendor.Host)
	if err != nil {
		t.Fatal(err)
	}
	repo, err := ocicopy.Open(t.Context(), reg, "byoc/agent", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { repo.Close() })
	return vendor, repo
}
