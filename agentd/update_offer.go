package main

import (
	"context"
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

// applyOffer applies the offered release (or refuses it), writes the
// decision to the journal at once (note) and leaves it for the report.
func applyOffer(ctx context.Context, stateDir, offerID, release string, note func(kind, subject string, data map[string]string), log *slog.Logger) {
	u := &updater{stateDir: stateDir, registry: os.Getenv("BYOC_INSTALL_REGISTRY"), auto: true, confirmWithin: offerConfirmWithin,
		platform: runtime.GOOS + "/" + runtime.GOARCH, now: time.Now, stdout: io.Discard, offerID: offerID, by: "imsd offer " + offerID}
	err := u.apply(ctx, release)
	if err != nil {
		log.Warn("agent update offer not applied", "offer", offerID, "release", release, "reason", err)
		// A failure that is not a refusal (the registry unreachable, an
		// update in progress) is reported as one all the same: imsd
		// stops offering, and the operator offers again.
		if l := loadLastUpdate(stateDir); l == nil || l.OfferID != offerID {
			if nerr := addUpdateNote(stateDir, updateNote{Kind: "agent_update_refused", Subject: release,
				Data: map[string]string{"reason": err.Error(), "by": u.who(), "offer": offerID, "version": u.refusedVersion}}); nerr != nil {
				log.Error("record the refused agent update", "err", nerr)
			}
		}
	} else {
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

// updateReport is the update policy and the latest decision, for imsd.
func updateReport(stateDir string) *agentv1.UpdateReport {
	r := &agentv1.UpdateReport{Mode: "manual"}
	if st, err := permissions.Load(stateDir); err == nil {
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
			Time: timestamppb.New(l.At)}
	}
	return r
}
