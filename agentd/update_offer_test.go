package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
)

// The update report carries the policy and the latest decision; an offer
// that cannot be applied is recorded as refused with its offer id (so
// that imsd stops offering it), and journalled at once: failed, with its
// cause, since no policy refused it.
func TestUpdateReportAndOffer(t *testing.T) {
	state := t.TempDir()
	if r := updateReport(state); r.Mode != "manual" || r.Last != nil {
		t.Fatalf("fresh: %v", r)
	}
	var out bytes.Buffer
	if code := updateCmd(t.Context(), []string{"--state-dir", state, "policy", "--allow", ">=1.4 <2", "--window", "Sun 03:00-05:00"}, &out, &out, time.Now); code != 0 {
		t.Fatalf("policy: %s", out.String())
	}
	var noted []string
	note := func(kind, subject string, data map[string]string) { noted = append(noted, kind+" "+data["offer"]) }
	applyOffer(t.Context(), state, "uo_1", "oci://r.example/byoc/agent@sha256:"+strings.Repeat("0", 64), false, note, slog.New(slog.DiscardHandler))
	r := updateReport(state)
	if r.Mode != "allow" || r.Allow != ">=1.4 <2" || r.Window != "Sun 03:00-05:00 UTC" {
		t.Fatalf("policy report: %v", r)
	}
	if l := r.Last; l == nil || l.Kind != "failed" || l.Cause != "error" || l.OfferId != "uo_1" || !strings.Contains(l.Reason, "identity") {
		t.Fatalf("last: %v", r.Last)
	}
	if strings.Join(noted, ",") != "agent_update_failed uo_1" {
		t.Fatalf("journalled: %v", noted)
	}
	if ns, _ := takeUpdateNotes(state); len(ns) != 0 {
		t.Fatalf("notes left for the next start: %v", ns)
	}
}

// An offer the update window deferred and imsd then withdrew is dropped:
// journalled and reported withdrawn, never applied when the window opens
// (runDeferredOffers applies nothing, and an apply of it is refused). A
// withdrawal of an offer already applied changes nothing.
func TestUpdateWithdrawalDropsADeferredOffer(t *testing.T) {
	state := t.TempDir()
	agentKey, _ := identity.NewKey()
	imsdPub, _, _ := ed25519.GenerateKey(rand.Reader)
	if err := identity.Save(state, identity.Identity{AgentID: "agt_test", PrivateKey: agentKey, IMSDKeys: []ed25519.PublicKey{imsdPub}}); err != nil {
		t.Fatal(err)
	}
	const ref = "oci://r.example/byoc/agent@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	if err := addUpdateNote(state, updateNote{Kind: "agent_update_deferred", Subject: ref,
		Data: map[string]string{"reason": "the update window is closed", "cause": "window", "offer": "uo_1", "version": "1.5.0"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := takeUpdateNotes(state); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	var noted []string
	note := func(kind, subject string, data map[string]string) {
		noted = append(noted, kind+" "+data["offer"]+" "+subject)
	}
	withdrawOffer(state, "uo_1", note, log)
	if strings.Join(noted, ",") != "agent_update_withdrawn uo_1 "+ref {
		t.Fatalf("journalled: %v", noted)
	}
	if l := updateReport(state).Last; l == nil || l.Kind != "withdrawn" || l.OfferId != "uo_1" || l.Cause != "withdrawn" || l.Release != ref {
		t.Fatalf("reported: %v", l)
	}
	// The window opens: nothing is applied.
	applied := make(chan string, 1)
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		runDeferredOffers(ctx, state, make(chan struct{}), time.Now, func(_ context.Context, offerID, _ string) { applied <- offerID }, func() {}, log)
	}()
	select {
	case id := <-applied:
		t.Fatalf("the withdrawn offer %s was applied when the window opened", id)
	case <-time.After(300 * time.Millisecond):
	}
	stop()
	<-done
	u := &updater{stateDir: state, auto: true, now: time.Now, stdout: io.Discard, offerID: "uo_1", by: "imsd offer uo_1"}
	if err := u.apply(t.Context(), ref); !errors.Is(err, errOfferWithdrawn) {
		t.Fatalf("apply of a withdrawn offer: %v", err)
	}
	// Withdrawn again (imsd resends until the report answers): no new note.
	noted = nil
	withdrawOffer(state, "uo_1", note, log)
	if len(noted) != 0 {
		t.Fatalf("journalled twice: %v", noted)
	}
	// An applied offer is not undone.
	if err := addUpdateNote(state, updateNote{Kind: "agent_update_applied", Subject: ref, Data: map[string]string{"offer": "uo_2", "to": "1.5.0"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := takeUpdateNotes(state); err != nil {
		t.Fatal(err)
	}
	withdrawOffer(state, "uo_2", note, log)
	if l := loadLastUpdate(state); len(noted) != 0 || l.Kind != "applied" || l.OfferID != "uo_2" {
		t.Fatalf("an applied offer withdrawn: %v, last %+v", noted, l)
	}
}

// An offer that asked for imsd's confirmation (UpdateOffer.confirm) and
// that the window deferred is never applied by the agent's own timer:
// once the window is open the report names it (confirm_offer_id) and the
// agent asks at once; only the offer imsd sends in answer applies it. A
// shut window asks nothing. An older imsd's offer (no confirm) applies
// at the window's opening as before. An offer decided already is left
// as decided when imsd sends it again.
func TestDeferredOfferWaitsForIMSDConfirmation(t *testing.T) {
	state := t.TempDir()
	var out bytes.Buffer
	policy := func(args ...string) {
		t.Helper()
		out.Reset()
		if code := updateCmd(t.Context(), append([]string{"--state-dir", state, "policy", "--allow", ">=1.4 <2"}, args...), &out, &out, time.Now); code != 0 {
			t.Fatalf("policy: %s", out.String())
		}
	}
	const ref = "oci://r.example/byoc/agent@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	log := slog.New(slog.DiscardHandler)
	// The deferral itself: the journal says it waits for imsd.
	u := &updater{stateDir: state, auto: true, now: time.Now, stdout: io.Discard, offerID: "uo_1", by: "imsd offer uo_1", confirm: true}
	next := time.Now().Add(time.Hour)
	if err := u.deferTo(ref, "1.5.0", "daily 03:00-04:00 UTC", next); !errors.As(err, new(deferredError)) {
		t.Fatalf("defer: %v", err)
	}
	ns, err := takeUpdateNotes(state)
	if err != nil || len(ns) != 1 || ns[0].Data["confirm"] != "imsd" || !strings.Contains(ns[0].Data["reason"], "once imsd confirms the offer still stands") {
		t.Fatalf("deferred note: %+v %v", ns, err)
	}
	if l := loadLastUpdate(state); l == nil || l.Kind != "deferred" || !l.Confirm || l.OfferID != "uo_1" {
		t.Fatalf("last: %+v", l)
	}

	run := func() (applied chan string, asked chan struct{}, stop func()) {
		applied, asked = make(chan string, 4), make(chan struct{}, 4)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			// Not blocking: a deferred offer this stand-in leaves deferred
			// is applied again at once.
			runDeferredOffers(ctx, state, make(chan struct{}), time.Now, func(_ context.Context, offerID, _ string) {
				select {
				case applied <- offerID:
				default:
				}
			}, func() {
				select {
				case asked <- struct{}{}:
				default:
				}
			}, log)
		}()
		return applied, asked, func() { cancel(); <-done }
	}

	// A window shut now: nothing asked, nothing reported, nothing applied.
	h := time.Now().UTC().Add(3 * time.Hour).Hour()
	policy("--window", fmt.Sprintf("daily %02d:00-%02d:30 UTC", h, h))
	if r := updateReport(state); r.ConfirmOfferId != "" {
		t.Fatalf("window shut, confirmation asked: %v", r)
	}
	status := func() string {
		t.Helper()
		out.Reset()
		if code := updateCmd(t.Context(), []string{"--state-dir", state, "status"}, &out, &out, time.Now); code != 0 {
			t.Fatalf("status: %s", out.String())
		}
		return out.String()
	}
	if st := status(); !strings.Contains(st, "Deferred: imsd's offer uo_1 of 1.5.0") || !strings.Contains(st, "it applies when the window opens") ||
		!strings.Contains(st, "once imsd confirms the offer still stands") {
		t.Fatalf("agentd update status, window shut:\n%s", st)
	}
	applied, asked, stop := run()
	select {
	case <-asked:
		t.Fatal("asked imsd with the window shut")
	case id := <-applied:
		t.Fatalf("applied %s with the window shut", id)
	case <-time.After(300 * time.Millisecond):
	}
	stop()

	// The window open: the report asks, the agent asks at once, and
	// applies nothing itself.
	policy("--no-window")
	if r := updateReport(state); r.ConfirmOfferId != "uo_1" {
		t.Fatalf("window open, confirmation not asked: %v", r)
	}
	if st := status(); !strings.Contains(st, "the window is open, and the agent asks imsd at each heartbeat") {
		t.Fatalf("agentd update status, window open:\n%s", st)
	}
	applied, asked, stop = run()
	select {
	case <-asked:
	case <-time.After(5 * time.Second):
		t.Fatal("the window is open and the agent did not ask imsd")
	}
	select {
	case id := <-applied:
		t.Fatalf("applied %s without imsd's confirmation", id)
	case <-time.After(300 * time.Millisecond):
	}
	stop()

	// imsd's answer goes through applyOffer (here the identity is
	// missing, so it fails; the point is that it is decided again).
	var noted []string
	note := func(kind, subject string, data map[string]string) { noted = append(noted, kind+" "+data["offer"]) }
	applyOffer(t.Context(), state, "uo_1", ref, true, note, log)
	if strings.Join(noted, ",") != "agent_update_failed uo_1" {
		t.Fatalf("the confirmed offer was not decided again: %v", noted)
	}
	if r := updateReport(state); r.ConfirmOfferId != "" {
		t.Fatalf("still asking after the decision: %v", r)
	}
	if st := status(); strings.Contains(st, "Deferred") {
		t.Fatalf("agentd update status after the decision:\n%s", st)
	}
	// Sent again before the report reached imsd: left as decided, not
	// tried again.
	noted = nil
	var logged bytes.Buffer
	applyOffer(t.Context(), state, "uo_1", ref, true, note, slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if len(noted) != 0 || !strings.Contains(logged.String(), "decided already") {
		t.Fatalf("a decided offer decided twice: %v; log %s", noted, logged.String())
	}

	// An older imsd's offer (no confirm): applied at the window's opening.
	if err := addUpdateNote(state, updateNote{Kind: "agent_update_deferred", Subject: ref,
		Data: map[string]string{"reason": "closed", "cause": "window", "offer": "uo_2", "version": "1.5.0"}}); err != nil {
		t.Fatal(err)
	}
	if r := updateReport(state); r.ConfirmOfferId != "" {
		t.Fatalf("an offer that asked for no confirmation reported: %v", r)
	}
	applied, _, stop = run()
	select {
	case id := <-applied:
		if id != "uo_2" {
			t.Fatalf("applied %s", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an older imsd's deferred offer was not applied when the window opened")
	}
	stop()
}
