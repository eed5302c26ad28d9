package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"runtime"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/agentd/permissions"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// Offers: imsd offers an agent release (byoc agent update); the agent
// applies it through agentd update apply's path as an automatic update,
// so that the customer's policy decides (a manual policy, or a pin to
// another version, refuses it; a range applies it inside its window),
// and reports the decision in its next heartbeat (updateReport).

// offerConfirmWithin is how long an offered update's new version has to
// reconnect, as agentd update apply's default.
const offerConfirmWithin = 2 * time.Minute

// applyOffer applies the offered release (or refuses it, or defers it to
// the customer's update window), writes the decision to the journal at
// once (note) and leaves it for the report. An offer decided already
// (imsd sent it again before the report reached it) is left as decided;
// a deferred one is decided again (imsd's confirmation, once the window
// opened, applies it). confirm is the offer's UpdateOffer.confirm.
func applyOffer(ctx context.Context, stateDir, offerID, release string, confirm bool, note func(kind, subject string, data map[string]string), log *slog.Logger) {
	if l := loadLastUpdate(stateDir); l != nil && l.OfferID == offerID && l.Kind != "deferred" {
		log.Debug("agent update offer decided already", "offer", offerID, "decision", l.Kind)
		return
	}
	u := &updater{stateDir: stateDir, registry: os.Getenv("BYOC_INSTALL_REGISTRY"), auto: true, confirmWithin: offerConfirmWithin,
		platform: runtime.GOOS + "/" + runtime.GOARCH, now: time.Now, stdout: io.Discard, offerID: offerID, by: "imsd offer " + offerID,
		confirm: confirm}
	err := u.apply(ctx, release)
	var deferred deferredError
	switch {
	case errors.Is(err, errOfferWithdrawn):
		log.Info("agent update offer not applied: imsd withdrew it", "offer", offerID, "release", release)
	case errors.As(err, &deferred):
		log.Info("agent update offer deferred to the customer's update window", "offer", offerID, "release", release, "at", deferred.at)
	case err != nil:
		log.Warn("agent update offer not applied", "offer", offerID, "release", release, "reason", err)
		// A failure recorded nowhere yet (an update in progress, the
		// identity unreadable) is reported as failed all the same: imsd
		// stops offering, and the operator offers again.
		if l := loadLastUpdate(stateDir); l == nil || l.OfferID != offerID || l.Kind == "deferred" {
			if nerr := addUpdateNote(stateDir, updateNote{Kind: "agent_update_failed", Subject: release,
				Data: map[string]string{"reason": err.Error(), "cause": "error", "by": u.who(), "offer": offerID, "version": u.refusedVersion}}); nerr != nil {
				log.Error("record the failed agent update", "err", nerr)
			}
		}
	default:
		log.Info("agent update offer applied: draining, then running the new version", "offer", offerID, "release", release)
	}
	notes, terr := takeUpdateNotes(stateDir)
	if terr != nil {
		log.Error("agent update notes", "err", terr)
	}
	for _, n := range notes {
		note(n.Kind, n.Subject, n.Data)
	}
}

// withdrawOffer drops offer offerID, which imsd withdrew (a verified
// withdrawal): it is recorded as withdrawn first (updater.apply refuses
// it from then on, a deferred one included), then, unless the agent took
// it already (applied, refused, failed...: an applied update is not
// undone), the decision is journalled (agent_update_withdrawn) and kept
// as the latest, for the next report. Calls are serialised with the
// offers' applies (main's offerMu).
func withdrawOffer(stateDir, offerID string, note func(kind, subject string, data map[string]string), log *slog.Logger) {
	if err := addWithdrawnOffer(stateDir, offerID); err != nil {
		log.Error("record the withdrawal of an agent update offer", "offer", offerID, "err", err)
		return
	}
	l := loadLastUpdate(stateDir)
	if l != nil && l.OfferID == offerID && l.Kind != "deferred" {
		log.Info("imsd withdrew an agent update offer the agent took already: nothing to undo", "offer", offerID, "decision", l.Kind)
		return
	}
	release, reason := "", "imsd withdrew the offer before the agent applied it"
	switch {
	case l != nil && l.OfferID == offerID:
		release, reason = l.Release, "imsd withdrew the offer the update window deferred: the agent never applies it"
	case l != nil && l.Kind == "deferred":
		// imsd's offer (one an agent at a time) replaced the deferred
		// one before it was withdrawn: neither applies.
		reason = "imsd withdrew the offer that replaced the deferred offer " + l.OfferID + ": the agent applies neither"
		if err := addWithdrawnOffer(stateDir, l.OfferID); err != nil {
			log.Error("record the withdrawal of an agent update offer", "offer", l.OfferID, "err", err)
		}
	}
	if err := addUpdateNote(stateDir, updateNote{Kind: "agent_update_withdrawn", Subject: release,
		Data: map[string]string{"reason": reason, "cause": "withdrawn", "by": "imsd", "offer": offerID}}); err != nil {
		log.Error("record the withdrawal of an agent update offer", "offer", offerID, "err", err)
	}
	log.Info("agent update offer withdrawn by imsd: dropped", "offer", offerID, "release", release)
	notes, err := takeUpdateNotes(stateDir)
	if err != nil {
		log.Error("agent update notes", "err", err)
	}
	for _, n := range notes {
		note(n.Kind, n.Subject, n.Data)
	}
}

// confirmRecheck is how often an agent whose deferred offer awaits
// imsd's confirmation looks at its window again (and asks again).
const confirmRecheck = time.Minute

// runDeferredOffers applies the offer the customer's update window
// deferred (the latest decision, deferred: it survives a restart) when
// the window next opens, as the policy then says, and again after each
// offer this agent takes (wake). An offer that asked for imsd's
// confirmation (lastUpdate.Confirm) is not applied here: once the window
// is open the report asks imsd (updateReport's confirm_offer_id, sent at
// once through ask), and the offer imsd sends in answer applies it (a
// withdrawal drops it); cut off from imsd, the agent waits, and a window
// that closes meanwhile defers it to its next opening. It returns when
// ctx ends.
func runDeferredOffers(ctx context.Context, stateDir string, wake <-chan struct{}, now func() time.Time,
	apply func(ctx context.Context, offerID, release string), ask func(), log *slog.Logger) {
	asked := ""
	for {
		var timer <-chan time.Time
		l := loadLastUpdate(stateDir)
		if l != nil && l.Kind == "deferred" && l.OfferID != "" {
			at, shut := now(), false
			if st, err := permissions.Load(stateDir); err == nil {
				var next time.Time
				if shut, next = st.Update.WindowShut(at); shut && !next.IsZero() {
					at = next
				}
			}
			switch {
			case l.Confirm && !shut:
				if asked != l.OfferID {
					log.Info("the update window is open: asking imsd to confirm the deferred agent update", "offer", l.OfferID, "release", l.Release)
					asked = l.OfferID
				}
				ask()
				at = now().Add(confirmRecheck)
			case l.Confirm && !at.After(now()):
				// A window that never opens: look again later (the
				// customer may change it).
				at = now().Add(confirmRecheck)
			default:
				log.Info("a deferred agent update applies when the update window opens", "offer", l.OfferID, "release", l.Release,
					"at", at.UTC(), "once_imsd_confirms", l.Confirm)
				asked = ""
			}
			t := time.NewTimer(at.Sub(now()))
			timer = t.C
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-wake:
				t.Stop()
				continue
			case <-timer:
			}
			if !l.Confirm {
				apply(ctx, l.OfferID, l.Release)
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		}
	}
}

// updateReport is the update policy and the latest decision, for imsd.
func updateReport(stateDir string) *agentv1.UpdateReport {
	r := &agentv1.UpdateReport{Mode: "manual"}
	st, perr := permissions.Load(stateDir)
	if perr == nil {
		p := st.Update
		r.Pin, r.Allow, r.Window = p.Pin, p.Allow, p.Window
		switch {
		case p.Pin != "":
			r.Mode = "pin"
		case p.Allow != "":
			r.Mode = "allow"
		}
	}
	if l := loadLastUpdate(stateDir); l != nil {
		r.Last = &agentv1.UpdateDecision{Kind: l.Kind, Release: l.Release, OfferId: l.OfferID, Version: l.Version, Reason: l.Reason,
			Time: timestamppb.New(l.At), Cause: l.Cause}
		// Asked only with the window open (an unreadable policy applies
		// nothing, so it asks nothing).
		if l.Kind == "deferred" && l.Confirm && l.OfferID != "" && perr == nil {
			if shut, _ := st.Update.WindowShut(time.Now()); !shut {
				r.ConfirmOfferId = l.OfferID
			}
		}
	}
	return r
}
