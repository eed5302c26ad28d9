package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/internal/auditchain"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// Every change of the customer's plugin pins that the agent reads is in
// its journal: the pins it starts with, a pin, a re-pin (with the
// previous checksum) and an unpin (issue 29).
func TestPinChangesAreJournalled(t *testing.T) {
	dir := t.TempDir()
	saveTestIdentity(t, dir)
	path := filepath.Join(dir, pluginhost.PinFileName)
	a1, b1 := strings.Repeat("a1", 32), strings.Repeat("b2", 32)
	write := func(pins map[string]pluginhost.Pin) {
		t.Helper()
		if err := pluginhost.WritePins(path, pluginhost.PinFile{Pins: pins}); err != nil {
			t.Fatal(err)
		}
	}
	write(map[string]pluginhost.Pin{"kvfile": {SHA256: a1, PinnedBy: "alice"}})
	w := &pluginhost.PinWatcher{Path: path}
	a, err := New(context.Background(), Config{IMSURL: "http://127.0.0.1:1", StateDir: dir, Runner: &runRecorder{},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PinWatcher: w})
	if err != nil {
		t.Fatal(err)
	}
	defer a.journal.Close()
	wantJournal(t, dir, KindPluginPinned, "plugin:kvfile", a1)
	write(map[string]pluginhost.Pin{"kvfile": {SHA256: b1, PinnedBy: "bob"}})
	if _, err := w.Pins(); err != nil {
		t.Fatal(err)
	}
	wantJournal(t, dir, KindPluginPinned, "plugin:kvfile", b1)
	wantJournal(t, dir, KindPluginPinned, "plugin:kvfile", "bob")
	write(map[string]pluginhost.Pin{})
	if _, err := w.Pins(); err != nil {
		t.Fatal(err)
	}
	wantJournal(t, dir, KindPluginUnpinned, "plugin:kvfile", b1)
}

// A pinned plugin release the agent refuses (a job's Fetch fails a check
// of it) is in the agent's journal once, as the refusals of a job's
// artifact are (supply_chain.refused, naming the type, the release, its
// version and digest, the rule and the reason), however many jobs are
// refused it; the refusal outlives a restart of the agent on the same
// state dir (its report still says refused, with the first refusal's
// time, and the jobs after the restart journal nothing new); a release
// held refused that installs after all is journalled as verified.
func TestPluginRefusalJournalledOnceAndKept(t *testing.T) {
	dir := t.TempDir()
	saveTestIdentity(t, dir)
	path := filepath.Join(dir, pluginhost.PinFileName)
	const oci = "oci:/reg/plugins/greeting@sha256:3a0f"
	if err := pluginhost.WritePins(path, pluginhost.PinFile{Pins: map[string]pluginhost.Pin{"greeting": {OCI: oci, PinnedBy: "alice"}}}); err != nil {
		t.Fatal(err)
	}
	why := "plugin greeting 0.3.0 (sha256:3a0f): no signature by a trusted key"
	var accept bool
	start := func() (*Agent, *pluginhost.Loader) {
		t.Helper()
		return startPinnedAgent(t, dir, path, func(ctx context.Context, typ string, p pluginhost.Pin) (pluginhost.Pin, error) {
			if accept {
				return pluginhost.Pin{OCI: p.OCI, Version: "0.3.0", SignedBy: "k1", Installed: filepath.Join(dir, "byoc-plugin-greeting")}, nil
			}
			return pluginhost.Pin{}, &pluginhost.RefusedError{Version: "0.3.0", Err: errors.New(why)}
		})
	}
	job := func(l *pluginhost.Loader) {
		t.Helper()
		_, err := l.Start(context.Background(), "greeting", pluginhost.StartOptions{WorkDir: t.TempDir()})
		if !accept && (err == nil || !strings.Contains(err.Error(), why)) {
			t.Fatalf("a job of the refused release: %v", err)
		}
	}
	refusals := func() []map[string]string {
		t.Helper()
		var out []map[string]string
		for _, r := range greetingSupplyChain(t, dir) {
			var d map[string]string
			if err := json.Unmarshal([]byte(r.Data), &d); err != nil {
				t.Fatal(err)
			}
			d["kind"] = r.Kind
			out = append(out, d)
		}
		return out
	}

	a, l := start()
	job(l)
	job(l)
	job(l)
	want := map[string]string{"kind": KindSupplyChainRefused, "type": "greeting", "artifact": oci, "digest": "sha256:3a0f", "version": "0.3.0",
		"rule": RulePluginRelease, "reason": why}
	if got := refusals(); len(got) != 1 || !maps.Equal(got[0], want) {
		t.Fatalf("after three refused jobs, the journal's refusals:\n%v\nwant one:\n%v", got, want)
	}
	before := onePluginRelease(t, a)
	if before.Verdict != "refused" || before.Reason != why || before.Version != "0.3.0" || before.CheckTime == nil {
		t.Fatalf("report: %v", before)
	}
	a.journal.Close()
	a.auditCopy.Close()

	// The agent restarts on the same state dir: its report says refused
	// before any job, with the first refusal's time.
	a, l = start()
	defer a.journal.Close()
	if after := onePluginRelease(t, a); after.Verdict != "refused" || after.Reason != why || !after.CheckTime.AsTime().Equal(before.CheckTime.AsTime()) {
		t.Fatalf("report after a restart: %v, before it: %v", after, before)
	}
	job(l)
	if got := refusals(); len(got) != 1 {
		t.Fatalf("a job after the restart journalled the same refusal again: %v", got)
	}
	if after := onePluginRelease(t, a); !after.CheckTime.AsTime().Equal(before.CheckTime.AsTime()) {
		t.Fatalf("the same refusal's time changed: %v, was %v", after.CheckTime.AsTime(), before.CheckTime.AsTime())
	}

	// Another reason is another refusal.
	why = "plugin greeting 0.3.0 (sha256:3a0f): the linux/amd64 binary has no layer"
	job(l)
	if got := refusals(); len(got) != 2 || got[1]["reason"] != why {
		t.Fatalf("a refusal for another reason: %v", got)
	}
	// The release installs after all (the vendor's key became trusted).
	accept = true
	job(l)
	if got := refusals(); len(got) != 3 || got[2]["kind"] != KindSupplyChainVerified || got[2]["key_id"] != "k1" ||
		got[2]["previously_refused"] != why || got[2]["digest"] != "sha256:3a0f" {
		t.Fatalf("the release installed after its refusal: %v", got)
	}
	if r := onePluginRelease(t, a); r.Verdict == "refused" {
		t.Fatalf("still refused after the install: %v", r)
	}
}

// A refusal of a pinned release ends with its pin: when the customer
// installs that release after all (agentd plugin install verified and
// pinned it: another process, so no Fetch of the agent's accepts it), the
// agent's report says verified (imsd then records agent.plugin_verified)
// and its journal supply_chain.verified, once, even across a restart;
// when the customer re-pins the type to another release (while the agent
// runs, or while it is stopped), the old refusal leaves the refusals
// file and the report, with nothing journalled as verified.
func TestPluginRefusalEndsWithItsPin(t *testing.T) {
	dir := t.TempDir()
	saveTestIdentity(t, dir)
	path := filepath.Join(dir, pluginhost.PinFileName)
	const r1, r2, r3 = "oci:/reg/plugins/greeting@sha256:3a0f", "oci:/reg/plugins/greeting@sha256:4b1e", "oci:/reg/plugins/greeting@sha256:5c2d"
	pin := func(p pluginhost.Pin) {
		t.Helper()
		if err := pluginhost.UpdatePins(path, func(pf *pluginhost.PinFile, _ error) error {
			pf.Pins["greeting"] = p
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	pin(pluginhost.Pin{OCI: r1, PinnedBy: "alice"})
	why := "plugin greeting 0.3.0 (sha256:3a0f): no signature by a trusted key"
	start := func() (*Agent, *pluginhost.Loader) {
		t.Helper()
		a, l := startPinnedAgent(t, dir, path, func(ctx context.Context, typ string, p pluginhost.Pin) (pluginhost.Pin, error) {
			return pluginhost.Pin{}, &pluginhost.RefusedError{Version: "0.3.0", Err: errors.New(why)}
		})
		t.Cleanup(func() { a.journal.Close(); a.auditCopy.Close() })
		return a, l
	}
	refusedJob := func(l *pluginhost.Loader) {
		t.Helper()
		if _, err := l.Start(context.Background(), "greeting", pluginhost.StartOptions{WorkDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), why) {
			t.Fatalf("a job of the refused release: %v", err)
		}
	}
	kinds := func() []string {
		t.Helper()
		var out []string
		for _, r := range greetingSupplyChain(t, dir) {
			out = append(out, r.Kind)
		}
		return out
	}
	refusalsFile := func() string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, pluginhost.RefusalsFileName))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	a, l := start()
	refusedJob(l)
	if r := onePluginRelease(t, a); r.Verdict != "refused" || !strings.Contains(refusalsFile(), r1) {
		t.Fatalf("after the refusal: report %v, refusals file %s", r, refusalsFile())
	}
	// agentd plugin install of r1, now verified (the vendor's key is
	// trusted): it pins r1 installed.
	pin(pluginhost.Pin{SHA256: strings.Repeat("ab", 32), PinnedAt: time.Now().UTC(), PinnedBy: "alice", OCI: r1, Version: "0.3.0",
		SignedBy: "k1", Installed: filepath.Join(dir, "plugins", "greeting-x", "byoc-plugin-greeting")})
	if r := onePluginRelease(t, a); r.Verdict != "verified" || r.KeyId != "k1" || r.Reason != "" {
		t.Fatalf("after agentd plugin install of the refused release: report %v", r)
	}
	if got := kinds(); !slices.Equal(got, []string{KindSupplyChainRefused, KindSupplyChainVerified}) {
		t.Fatalf("journal after the install: %v", got)
	}
	wantJournal(t, dir, KindSupplyChainVerified, "plugin:greeting", why)
	if f := refusalsFile(); strings.Contains(f, "greeting") {
		t.Fatalf("the refusals file still holds it: %s", f)
	}
	a.journal.Close()
	a.auditCopy.Close()
	a, _ = start()
	if r := onePluginRelease(t, a); r.Verdict != "verified" {
		t.Fatalf("after a restart: %v", r)
	}
	if got := kinds(); len(got) != 2 {
		t.Fatalf("a restart journalled again: %v", got)
	}

	// Re-pinned while the agent runs: r2 is refused, then the type is
	// pinned to r3.
	pin(pluginhost.Pin{OCI: r2, PinnedBy: "alice"})
	a, l = start()
	refusedJob(l)
	if r := onePluginRelease(t, a); r.Verdict != "refused" || r.Release != r2 {
		t.Fatalf("r2: %v", r)
	}
	pin(pluginhost.Pin{OCI: r3, PinnedBy: "alice"})
	if r := onePluginRelease(t, a); r.Verdict != "" || r.Release != r3 || strings.Contains(refusalsFile(), r2) {
		t.Fatalf("re-pinned to r3: report %v, refusals file %s", r, refusalsFile())
	}
	// Re-pinned while the agent is stopped: r3 is refused, the agent
	// stops, the type is pinned back to r2, the agent starts.
	refusedJob(l)
	if !strings.Contains(refusalsFile(), r3) {
		t.Fatalf("r3's refusal is not kept: %s", refusalsFile())
	}
	a.journal.Close()
	a.auditCopy.Close()
	pin(pluginhost.Pin{OCI: r2, PinnedBy: "alice"})
	a, _ = start()
	if r := onePluginRelease(t, a); r.Verdict != "" || r.Release != r2 || strings.Contains(refusalsFile(), "greeting") {
		t.Fatalf("re-pinned while stopped: report %v, refusals file %s", r, refusalsFile())
	}
	if got := kinds(); !slices.Equal(got, []string{KindSupplyChainRefused, KindSupplyChainVerified, KindSupplyChainRefused, KindSupplyChainRefused}) {
		t.Fatalf("journal: %v", got)
	}
}

// startPinnedAgent starts an agent on state dir dir that reads the
// customer's pins from path, and a loader of its plugins whose releases
// fetch fetches (and checks).
func startPinnedAgent(t testing.TB, dir, path string, fetch func(context.Context, string, pluginhost.Pin) (pluginhost.Pin, error)) (*Agent, *pluginhost.Loader) {
	t.Helper()
	w := &pluginhost.PinWatcher{Path: path}
	a, err := New(context.Background(), Config{IMSURL: "http://127.0.0.1:1", StateDir: dir, Runner: &runRecorder{},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PinWatcher: w})
	if err != nil {
		t.Fatal(err)
	}
	return a, &pluginhost.Loader{PinWatcher: w, Fetch: fetch}
}

// greetingSupplyChain is the supply-chain records of plugin greeting in
// the journal of the agent in dir.
func greetingSupplyChain(t *testing.T, dir string) []auditchain.Record {
	t.Helper()
	var out []auditchain.Record
	for _, r := range agentJournal(t, dir) {
		if strings.HasPrefix(r.Kind, "supply_chain.") && r.Subject == "plugin:greeting" {
			out = append(out, r)
		}
	}
	return out
}

// onePluginRelease is the one plugin release in a's report; it fails
// the test if the report has none or several.
func onePluginRelease(t testing.TB, a *Agent) *agentv1.PluginRelease {
	t.Helper()
	r := a.pluginReport()
	if r == nil || len(r.Releases) != 1 {
		t.Fatalf("plugin report: %v", r)
	}
	return r.Releases[0]
}
