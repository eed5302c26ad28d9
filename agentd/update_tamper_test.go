package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/internal/buildinfo"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocisign"
	"github.com/byoc-dev/byoc/internal/plugindist"
	"github.com/byoc-dev/byoc/plugins/bundle"
)

// updateRig is an agent (state dir, install dir of agentd 1.4.0) and a
// vendor registry (an OCI layout) of agent releases signed by imsd's key.
type updateRig struct {
	t                 *testing.T
	state, bin, vroot string
	repo              *ocicopy.Repo
	key               ed25519.PrivateKey
	plat              string
	now               time.Time
}

func newUpdateRig(t *testing.T) *updateRig {
	t.Helper()
	r := &updateRig{t: t, state: t.TempDir(), bin: t.TempDir(), vroot: t.TempDir(), plat: runtime.GOOS + "/" + runtime.GOARCH,
		now: time.Date(2026, 11, 29, 4, 0, 0, 0, time.UTC)}
	var err error
	if r.repo, err = ocicopy.Open(t.Context(), ocicopy.Registry{LayoutRoot: r.vroot}, "agent", ocicopy.Credentials{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.repo.Close() })
	var pub ed25519.PublicKey
	pub, r.key, _ = ed25519.GenerateKey(rand.Reader)
	agentKey, _ := identity.NewKey()
	if err := identity.Save(r.state, identity.Identity{AgentID: "agt_test", PrivateKey: agentKey, IMSDKeys: []ed25519.PublicKey{pub}}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"agentd", bundle.Binary} {
		if err := os.WriteFile(filepath.Join(r.bin, f), fakeBinary(f, "1.4.0"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// push packs release v for platform p with the given agentd (nil: one
// that prints v) and returns its descriptor and reference; unsigned.
func (r *updateRig) push(v, p string, agentd []byte) (ocispec.Descriptor, string) {
	r.t.Helper()
	if agentd == nil {
		agentd = fakeBinary("agentd", v)
	}
	md, err := plugindist.PushAgent(r.t.Context(), r.repo, "", plugindist.AgentRelease{Version: v, Binaries: map[string]map[string][]byte{
		p: {"agentd": agentd, "byoc-plugins": fakeBinary(bundle.Binary, v)}}})
	if err != nil {
		r.t.Fatal(err)
	}
	return md, "oci:" + filepath.Join(r.vroot, "agent") + "@" + md.Digest.String()
}

// publish pushes release v and signs it with imsd's key.
func (r *updateRig) publish(v string) string {
	r.t.Helper()
	md, ref := r.push(v, r.plat, nil)
	r.sign(md, v)
	return ref
}

func (r *updateRig) sign(md ocispec.Descriptor, v string) plugindist.Signature {
	r.t.Helper()
	sig, err := plugindist.Sign(r.t.Context(), r.repo, md, plugindist.AgentType, v, r.key)
	if err != nil {
		r.t.Fatal(err)
	}
	return sig
}

func (r *updateRig) policy(args ...string) {
	r.t.Helper()
	var out bytes.Buffer
	if code := updateCmd(r.t.Context(), append([]string{"--state-dir", r.state, "policy"}, args...), &out, &out, func() time.Time { return r.now }); code != 0 {
		r.t.Fatalf("policy %v: %s", args, out.String())
	}
}

// apply applies ref as agentd update apply (offerID "") or an offer,
// running version from, into the install registry registry ("": the
// default, STATE/registry).
func (r *updateRig) apply(ref, from, offerID, registry string, auto bool) error {
	u := &updater{stateDir: r.state, installDir: r.bin, registry: registry, auto: auto, confirmWithin: time.Minute, platform: r.plat,
		now: func() time.Time { return r.now }, stdout: &bytes.Buffer{}, version: from, offerID: offerID}
	return u.apply(r.t.Context(), ref)
}

// running is the version the fake binary f prints.
func (r *updateRig) running(f string) string {
	r.t.Helper()
	b, err := os.ReadFile(filepath.Join(r.bin, f))
	if err != nil {
		r.t.Fatal(err)
	}
	if before, _, ok := strings.Cut(string(b), " (test build)"); ok {
		if fs := strings.Fields(before); len(fs) > 0 {
			return fs[len(fs)-1]
		}
	}
	return string(b)
}

// refused fails unless err names want, the latest decision is kind with
// cause, and nothing was swapped or left staged in the install dir.
func (r *updateRig) refused(what string, err error, want, kind, cause string) {
	r.t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		r.t.Fatalf("%s: %v; want refused: %s", what, err, want)
	}
	if l := loadLastUpdate(r.state); l == nil || l.Kind != kind || l.Cause != cause {
		r.t.Fatalf("%s: last decision %+v; want %s %s", what, l, kind, cause)
	}
	if r.running("agentd") != "1.4.0" || r.running(bundle.Binary) != "1.4.0" {
		r.t.Fatalf("%s: swapped the binaries", what)
	}
	ents, _ := os.ReadDir(r.bin)
	if len(ents) != 2 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		r.t.Fatalf("%s: the install dir holds %v; want only agentd and %s", what, names, bundle.Binary)
	}
	if s, _ := loadUpdateState(r.state); s != nil {
		r.t.Fatalf("%s: an update in progress: %+v", what, s)
	}
}

// imsd's genuine signature of release 1.5.0, attached to release 1.5.1
// (a referrer of 1.5.1 carrying 1.5.0's signature layer), does not pass
// for 1.5.1's: refused, cause signature, nothing swapped.
func TestAgentUpdateMovedSignature(t *testing.T) {
	r := newUpdateRig(t)
	r.policy("--allow", ">=1.4 <2")
	md150, _ := r.push("1.5.0", r.plat, nil)
	sig := r.sign(md150, "1.5.0")
	md151, ref151 := r.push("1.5.1", r.plat, nil)
	b, err := json.Marshal(sig)
	if err != nil {
		t.Fatal(err)
	}
	ld := content.NewDescriptorFromBytes(ocisign.SignatureMediaType, b)
	subject := ocispec.Descriptor{MediaType: md151.MediaType, Digest: md151.Digest, Size: md151.Size}
	if _, err := oras.PackManifest(t.Context(), r.repo, oras.PackManifestVersion1_1, ocisign.SignatureArtifactType,
		oras.PackManifestOptions{Subject: &subject, Layers: []ocispec.Descriptor{ld}}); err != nil {
		t.Fatal(err)
	}
	r.refused("a signature moved from 1.5.0", r.apply(ref151, "1.4.0", "uo_1", "", true), "does not match the artifact", "refused", causeSignature)
}

// A binary that is not the one signed: the vendor registry (or a proxy
// on the way) serves other bytes of the same size under a layer's
// digest, at the copy into the install registry, or the install
// registry holds them when the release is read back (no copy). Both
// fail (cause download), nothing swapped.
func TestAgentUpdateTamperedBinary(t *testing.T) {
	r := newUpdateRig(t)
	r.policy("--allow", ">=1.4 <2")
	ref := r.publish("1.5.0")
	p, err := plugindist.ParseRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	m, err := plugindist.ReadAgent(t.Context(), r.repo, p.Digest)
	if err != nil {
		t.Fatal(err)
	}
	l := m.Layers[plugindist.AgentKey(r.plat, "agentd")]
	if err := os.WriteFile(blobPath(r.vroot, l.Digest), bytes.Repeat([]byte("x"), int(l.Size)), 0o644); err != nil {
		t.Fatal(err)
	}
	r.refused("a tampered binary, copied", r.apply(ref, "1.4.0", "uo_1", "", true), "", "failed", causeDownload)
	r.refused("a tampered binary in the install registry", r.apply(ref, "1.4.0", "uo_2", "oci:"+r.vroot, true), "", "failed", causeDownload)
}

func blobPath(root string, d digest.Digest) string {
	return filepath.Join(root, "agent", "blobs", d.Algorithm().String(), d.Encoded())
}

// The policy is checked when the update is applied, not only when it is
// offered: an offer the window deferred, applied at the window's
// opening after the customer turned updates to manual, is refused.
func TestAgentUpdateDeferredThenManual(t *testing.T) {
	r := newUpdateRig(t)
	ref := r.publish("1.5.0")
	r.policy("--allow", ">=1.4 <2", "--window", "Sun 03:00-05:00")
	r.now = r.now.Add(24 * time.Hour)
	var de deferredError
	if err := r.apply(ref, "1.4.0", "uo_1", "", true); !errors.As(err, &de) {
		t.Fatalf("offer outside the window: %v", err)
	}
	r.policy("--manual")
	r.now = de.at.Add(-100 * time.Millisecond)
	applied, stopped := make(chan error, 1), make(chan struct{})
	ctx, stop := context.WithCancel(t.Context())
	go func() {
		defer close(stopped)
		runDeferredOffers(ctx, r.state, make(chan struct{}), func() time.Time { return r.now }, func(_ context.Context, offerID, release string) {
			r.now = de.at
			applied <- r.apply(release, "1.4.0", offerID, "", true)
		}, func() {}, slog.New(slog.DiscardHandler))
	}()
	var err error
	select {
	case err = <-applied:
	case <-time.After(30 * time.Second):
		t.Fatal("the deferred offer was not tried when the window opened")
	}
	stop()
	<-stopped
	r.refused("a deferred offer after the policy turned manual", err, "the update policy is manual", "refused", causePolicy)
}

// Two updates applied at once (the customer's agentd update apply while
// the agent applies an offer): the second is refused while the first
// runs, so the first keeps the old binaries as *.prev. Before the update
// lock, the second swapped too, the first's swap failed half-way and
// agentd.prev was the second's agentd: the old version, the rollback's
// target, was lost.
func TestAgentUpdateTwoAppliesAtOnce(t *testing.T) {
	r := newUpdateRig(t)
	r.policy("--allow", ">=1.4 <2")
	fifo := filepath.Join(t.TempDir(), "gate")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// 1.5.0's agentd, at its self-check, waits for the test.
	md, slow := r.push("1.5.0", r.plat, []byte("#!/bin/sh\nread x < '"+fifo+"'\necho 'agentd 1.5.0 (test build)'\n"))
	r.sign(md, "1.5.0")
	fast := r.publish("1.5.1")

	first := make(chan error, 1)
	go func() { first <- r.apply(slow, "1.4.0", "uo_1", "", true) }()
	gate := make(chan *os.File, 1)
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0) // returns once the self-check reads
		if err != nil {
			t.Error(err)
		}
		gate <- f
	}()
	var g *os.File
	select {
	case g = <-gate:
	case err := <-first:
		t.Fatalf("the first apply ended before its self-check: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the first apply's self-check did not start")
	}
	second := r.apply(fast, "1.4.0", "", "", false)
	if _, err := g.WriteString("go\n"); err != nil {
		t.Fatal(err)
	}
	g.Close()
	if err := <-first; err != nil {
		t.Fatalf("the first apply: %v", err)
	}
	if second == nil || !strings.Contains(second.Error(), "another agentd update apply") {
		t.Fatalf("the second apply, during the first: %v; want refused", second)
	}
	if r.running("agentd") != "1.5.0" || r.running(bundle.Binary) != "1.5.0" ||
		r.running("agentd.prev") != "1.4.0" || r.running(bundle.Binary+".prev") != "1.4.0" {
		t.Fatalf("after both: agentd %s, %s %s, prev %s and %s", r.running("agentd"), bundle.Binary, r.running(bundle.Binary),
			r.running("agentd.prev"), r.running(bundle.Binary+".prev"))
	}
	if s, err := loadUpdateState(r.state); err != nil || s == nil || s.To != "1.5.0" || s.OfferID != "uo_1" {
		t.Fatalf("update state: %+v %v", s, err)
	}
	// The new binaries are writable by their owner only.
	for _, f := range []string{"agentd", bundle.Binary} {
		if fi, err := os.Stat(filepath.Join(r.bin, f)); err != nil || fi.Mode().Perm()&0o022 != 0 {
			t.Fatalf("%s: %v %v", f, fi.Mode(), err)
		}
	}
}

// A new version that fails its start before it reaches the update check
// (here a --kubeconfig it cannot read; in life a config the new version
// refuses) is a crash loop too: its fourth start rolls back. Before, such
// a start exited before counting, so the supervisor restarted it forever.
func TestAgentUpdateEarlyExitCounts(t *testing.T) {
	state, bin := t.TempDir(), t.TempDir()
	for _, f := range []string{"agentd.prev", bundle.Binary + ".prev", "agentd", bundle.Binary} {
		if err := os.WriteFile(filepath.Join(bin, f), []byte(f), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := &updateState{From: "0.9.0", To: buildinfo.Get().Short(), Release: "oci:x@sha256:" + strings.Repeat("0", 64), Dir: bin,
		ConfirmWithin: time.Hour, Starts: maxUpdateStarts, FirstStart: time.Now(), Prev: map[string]binarySum{}}
	for _, f := range updateFiles() {
		sum, err := sumFile(filepath.Join(bin, f+".prev"))
		if err != nil {
			t.Fatal(err)
		}
		s.Prev[f] = sum
	}
	if err := saveUpdateState(state, s); err != nil {
		t.Fatal(err)
	}
	var execed []string
	realExec := execAgent
	execAgent = func(path string, _ []string) error { execed = append(execed, path); return errors.New("not in a test") }
	t.Cleanup(func() { execAgent = realExec })
	run(t.Context(), []string{"--state-dir", state, "--kubeconfig", filepath.Join(t.TempDir(), "missing")})
	if len(execed) != 1 || execed[0] != filepath.Join(bin, "agentd") {
		t.Fatalf("the fourth start, failing early, executed %v; want the old agentd", execed)
	}
	if b, _ := os.ReadFile(filepath.Join(bin, "agentd")); string(b) != "agentd.prev" {
		t.Fatalf("agentd is %q after the rollback", b)
	}
	if s, err := loadUpdateState(state); s != nil || err != nil {
		t.Fatalf("update in progress after the rollback: %+v %v", s, err)
	}
}

// An update swapped in while a job runs: the running agent executes the
// new agentd only once drain returned (its jobs finished and reported),
// never while drain runs; an agent stopped while draining executes
// nothing (the next start runs the new version).
func TestWatchUpdateExecsOnlyAfterDrain(t *testing.T) {
	state, bin := t.TempDir(), t.TempDir()
	var execed []string
	realExec := execAgent
	execAgent = func(path string, _ []string) error { execed = append(execed, path); return errors.New("not in a test") }
	t.Cleanup(func() { execAgent = realExec })
	if err := saveUpdateState(state, &updateState{From: "1.4.0", To: "1.5.0", Dir: bin, ConfirmWithin: time.Minute}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	draining, jobDone := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- watchUpdate(t.Context(), state, "1.4.0", time.Millisecond, func(ctx context.Context, _ time.Duration) error {
			close(draining)
			<-jobDone // the running job finishes
			return nil
		}, log)
	}()
	select {
	case <-draining:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not drain")
	}
	if len(execed) != 0 {
		t.Fatalf("executed %v while a job ran", execed)
	}
	close(jobDone)
	if err := <-done; err == nil || len(execed) != 1 || execed[0] != filepath.Join(bin, "agentd") {
		t.Fatalf("after the drain: %v, executed %v", err, execed)
	}

	// Stopped while draining: nothing executed.
	execed = nil
	ctx, stop := context.WithCancel(t.Context())
	draining = make(chan struct{})
	go func() {
		done <- watchUpdate(ctx, state, "1.4.0", time.Millisecond, func(ctx context.Context, _ time.Duration) error {
			close(draining)
			<-ctx.Done()
			return ctx.Err()
		}, log)
	}()
	<-draining
	stop()
	if err := <-done; err != nil || len(execed) != 0 {
		t.Fatalf("stopped while draining: %v, executed %v", err, execed)
	}
}

// A rollback puts back and runs *.prev only if they are the binaries the
// update replaced (SHA-256 and size recorded at apply). Untampered, the
// crash loop rolls back to 1.4.0 and runs it. A *.prev changed (same
// size, other bytes) or removed between apply and rollback, or a record
// of one file without the other, is refused: nothing executed or renamed, the new
// binaries kept, the refusal journalled (rollback_refused, cause
// prev_check) and kept in update.json for agentd update status; later
// starts roll nothing back; an offer cannot replace it, the customer's
// own apply can. Before the check, the rollback ran the changed file.
func TestAgentUpdateRollbackChecksPrev(t *testing.T) {
	var execed []string
	realExec := execAgent
	execAgent = func(path string, _ []string) error { execed = append(execed, path); return errors.New("not in a test") }
	t.Cleanup(func() { execAgent = realExec })
	log := slog.New(slog.DiscardHandler)
	applied := func() (*updateRig, string) {
		t.Helper()
		r := newUpdateRig(t)
		r.policy("--allow", ">=1.4 <2")
		if err := r.apply(r.publish("1.5.0"), "1.4.0", "", "", false); err != nil {
			t.Fatal(err)
		}
		if _, err := takeUpdateNotes(r.state); err != nil {
			t.Fatal(err)
		}
		execed = nil
		return r, r.publish("1.5.1")
	}
	// crashLoop starts 1.5.0 until it rolls back (or is refused).
	crashLoop := func(r *updateRig) error {
		t.Helper()
		for i := 1; i <= maxUpdateStarts; i++ {
			if s, err := updateAtStart(r.state, "1.5.0", r.now, log); err != nil || s == nil || s.Starts != i {
				t.Fatalf("start %d: %+v %v", i, s, err)
			}
		}
		_, err := updateAtStart(r.state, "1.5.0", r.now, log)
		return err
	}

	r, _ := applied()
	if err := crashLoop(r); err == nil || len(execed) != 1 || execed[0] != filepath.Join(r.bin, "agentd") {
		t.Fatalf("untampered rollback: %v, executed %v", err, execed)
	}
	if r.running("agentd") != "1.4.0" || r.running(bundle.Binary) != "1.4.0" {
		t.Fatal("untampered: not rolled back")
	}
	if l := loadLastUpdate(r.state); l == nil || l.Kind != "rolled_back" || l.Cause != "crash_loop" {
		t.Fatalf("untampered: last decision %+v", l)
	}

	if ns, err := takeUpdateNotes(r.state); err != nil || len(ns) != 1 || ns[0].Data["prev_sha256"] != "matched" {
		t.Fatalf("untampered: journal notes %+v %v", ns, err)
	}

	// An update applied by an agentd older than the record (no SHA-256
	// at all in update.json) still rolls back, and the journal says
	// nothing was checked.
	r, _ = applied()
	old, err := loadUpdateState(r.state)
	if err != nil || old == nil {
		t.Fatalf("state: %+v %v", old, err)
	}
	old.Prev = nil
	if err := saveUpdateState(r.state, old); err != nil {
		t.Fatal(err)
	}
	if err := crashLoop(r); err == nil || len(execed) != 1 || r.running("agentd") != "1.4.0" {
		t.Fatalf("an older agentd's update: %v, executed %v, agentd %s", err, execed, r.running("agentd"))
	}
	if ns, err := takeUpdateNotes(r.state); err != nil || len(ns) != 1 || !strings.HasPrefix(ns[0].Data["prev_sha256"], "none recorded") {
		t.Fatalf("an older agentd's update: journal notes %+v %v", ns, err)
	}
	execed = nil

	for _, tc := range []struct {
		name   string
		tamper func(r *updateRig)
		want   string
	}{
		{"agentd.prev changed", func(r *updateRig) {
			if err := os.WriteFile(filepath.Join(r.bin, "agentd.prev"), fakeBinary("agentd", "6.6.6"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, "agentd.prev is not the binary the update replaced: SHA-256 "},
		{bundle.Binary + ".prev changed", func(r *updateRig) {
			if err := os.WriteFile(filepath.Join(r.bin, bundle.Binary+".prev"), fakeBinary(bundle.Binary, "6.6.6"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, bundle.Binary + ".prev is not the binary the update replaced"},
		{"agentd.prev removed", func(r *updateRig) {
			if err := os.Remove(filepath.Join(r.bin, "agentd.prev")); err != nil {
				t.Fatal(err)
			}
		}, "agentd.prev: open"},
		{"one SHA-256 recorded of two", func(r *updateRig) {
			s, err := loadUpdateState(r.state)
			if err != nil || s == nil {
				t.Fatalf("state: %+v %v", s, err)
			}
			delete(s.Prev, "agentd")
			if err := saveUpdateState(r.state, s); err != nil {
				t.Fatal(err)
			}
		}, "records no SHA-256 of the old agentd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, v151 := applied()
			tc.tamper(r)
			if err := crashLoop(r); err != nil || len(execed) != 0 {
				t.Fatalf("refused rollback: %v, executed %v", err, execed)
			}
			if r.running("agentd") != "1.5.0" || r.running(bundle.Binary) != "1.5.0" {
				t.Fatalf("refused rollback: agentd %s, %s %s; want the new ones kept", r.running("agentd"), bundle.Binary, r.running(bundle.Binary))
			}
			s, err := loadUpdateState(r.state)
			if err != nil || s == nil || !strings.Contains(s.RollbackRefused, tc.want) {
				t.Fatalf("update state after the refusal: %+v %v; want %q", s, err, tc.want)
			}
			if l := loadLastUpdate(r.state); l == nil || l.Kind != "rollback_refused" || l.Cause != "prev_check" || !strings.Contains(l.Reason, tc.want) {
				t.Fatalf("last decision %+v", l)
			}
			ns, err := takeUpdateNotes(r.state)
			if err != nil || len(ns) != 1 || ns[0].Kind != "agent_update_rollback_refused" || ns[0].Data["rollback_cause"] != "crash_loop" ||
				!strings.Contains(ns[0].Data["reason"], "the rollback to 1.4.0 (started 3 times without reconnecting (a crash loop)) was refused: ") {
				t.Fatalf("journal notes: %+v %v", ns, err)
			}
			var out bytes.Buffer
			if code := updateCmd(t.Context(), []string{"--state-dir", r.state, "status"}, &out, &out, func() time.Time { return r.now }); code != 0 ||
				!strings.Contains(out.String(), "ROLLBACK REFUSED") || !strings.Contains(out.String(), tc.want) {
				t.Fatalf("status: %d %s", code, out.String())
			}
			// The next start neither rolls back nor journals again.
			if s, err := updateAtStart(r.state, "1.5.0", r.now, log); s != nil || err != nil || len(execed) != 0 {
				t.Fatalf("a start after the refusal: %+v %v, executed %v", s, err, execed)
			}
			if ns, _ := takeUpdateNotes(r.state); len(ns) != 0 {
				t.Fatalf("notes after the next start: %+v", ns)
			}
			if err := r.apply(v151, "1.5.0", "uo_2", "", true); err == nil || !strings.Contains(err.Error(), "was refused") {
				t.Fatalf("an offer over the refused rollback: %v", err)
			}
			if err := r.apply(v151, "1.5.0", "", "", false); err != nil {
				t.Fatalf("the customer's apply over the refused rollback: %v", err)
			}
			if s, _ := loadUpdateState(r.state); s == nil || s.To != "1.5.1" || s.RollbackRefused != "" || r.running("agentd.prev") != "1.5.0" {
				t.Fatalf("after the customer's apply: %+v, agentd.prev %s", s, r.running("agentd.prev"))
			}
		})
	}

	// The rollback at the reconnect deadline checks too.
	r, _ = applied()
	s, err := updateAtStart(r.state, "1.5.0", r.now, log)
	if err != nil || s == nil {
		t.Fatalf("start: %+v %v", s, err)
	}
	if err := os.WriteFile(filepath.Join(r.bin, "agentd.prev"), fakeBinary("agentd", "6.6.6"), 0o755); err != nil {
		t.Fatal(err)
	}
	s.FirstStart = time.Now().Add(-s.ConfirmWithin + 50*time.Millisecond)
	var noted []string
	never := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	err = confirmUpdate(t.Context(), r.state, s, never, func(kind, _ string, _ map[string]string) { noted = append(noted, kind) }, log)
	var refused rollbackRefusedError
	if !errors.As(err, &refused) || len(execed) != 0 || strings.Join(noted, ",") != "agent_update_rollback_refused" || r.running("agentd") != "1.5.0" {
		t.Fatalf("at the deadline: %v, executed %v, journalled %v, agentd %s", err, execed, noted, r.running("agentd"))
	}
}
