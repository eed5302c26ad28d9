package agent

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// updateReport is what the hello and heartbeats say of the agent's
// updates (Config.UpdateReport; nil: nothing).
func (a *Agent) updateReport() *agentv1.UpdateReport {
	if a.cfg.UpdateReport == nil {
		return nil
	}
	return a.cfg.UpdateReport()
}

// pluginReport is what the hello and heartbeats say of the plugin
// releases the customer pinned (Config.PinWatcher; nil: no pin file, or
// one the agent cannot read: its error is logged where it is used).
func (a *Agent) pluginReport() *agentv1.PluginReport {
	if a.cfg.PinWatcher == nil {
		return nil
	}
	rs, err := a.cfg.PinWatcher.Releases()
	if err != nil {
		return nil
	}
	out := &agentv1.PluginReport{}
	for _, r := range rs {
		p := &agentv1.PluginRelease{Type: r.Type, Release: r.OCI, Version: r.Version, Verdict: r.Verdict, KeyId: r.KeyID, Reason: r.Reason}
		if !r.At.IsZero() {
			p.CheckTime = timestamppb.New(r.At)
		}
		out.Releases = append(out.Releases, p)
	}
	return out
}

// updateOffer checks an agent release imsd offers (signed for this agent
// by a key it trusts) and hands it to Config.OnUpdateOffer, once per
// offer. imsd sends an offer again until the agent's report answers it.
// An offer the customer's window deferred is handed on again when imsd
// sends it in answer to the report's confirm_offer_id: imsd's word that
// it still stands, which the deferred offer waits for once the window
// is open. The decision is the customer's policy's, on this side.
func (a *Agent) updateOffer(ctx context.Context, o *agentv1.UpdateOffer) {
	if a.cfg.OnUpdateOffer == nil {
		return
	}
	if err := checkOfferID(o.OfferId); err != nil {
		a.log.Error("ignoring an agent update offer", "reason", err)
		return
	}
	if a.offers[o.OfferId] {
		if r := a.updateReport(); r == nil || r.ConfirmOfferId != o.OfferId {
			return
		}
	}
	c := agentproto.UpdateOfferClaims{KeyID: o.KeyId, InstallID: a.id.InstallID, AgentID: a.id.AgentID, OfferID: o.OfferId,
		Release: o.Release, Expires: time.UnixMilli(o.ExpireUnixMs)}
	if err := agentproto.VerifyUpdateOffer(a.keys, &c, o.Signature, a.now()); err != nil {
		a.log.Error("ignoring an agent update offer", "offer", o.OfferId, "release", o.Release, "reason", err)
		return
	}
	if !a.takeOffer("an agent update offer", o.OfferId) {
		return
	}
	if a.offers == nil || len(a.offers) >= maxOffersRemembered {
		a.offers = map[string]bool{}
	}
	a.offers[o.OfferId] = true
	a.log.Info("imsd offers an agent release", "offer", o.OfferId, "release", o.Release, "confirm", o.Confirm)
	go func() {
		defer a.offersInFlight.Add(-1)
		a.cfg.OnUpdateOffer(ctx, o.OfferId, o.Release, o.Confirm)
	}()
}

// maxOffersInFlight bounds the offers and withdrawals handed on whose
// handling has not ended (agentd takes them one at a time): imsd decides
// how many it sends, and each waiting one holds a goroutine. One past
// the bound is ignored, not remembered: imsd sends it again until the
// agent's report answers it. maxOffersRemembered bounds the offer ids
// remembered as handed on; past it they are forgotten (an offer decided
// already is left as decided: agentd's applyOffer).
const (
	maxOffersInFlight   = 8
	maxOffersRemembered = 1024
)

// takeOffer counts an offer or withdrawal (what) of offer id as in
// flight, or says no when maxOffersInFlight are.
func (a *Agent) takeOffer(what, id string) bool {
	if a.offersInFlight.Add(1) > maxOffersInFlight {
		a.offersInFlight.Add(-1)
		a.log.Warn("ignoring "+what+": imsd sends them faster than the agent decides them", "offer", id, "in_flight", maxOffersInFlight)
		return false
	}
	return true
}

// checkOfferID says why id cannot be an offer's id (it is the vendor's
// word, kept in the state dir and shown by agentd update status), or nil.
func checkOfferID(id string) error {
	if !plainID.MatchString(id) {
		return fmt.Errorf("offer id %q is not an id (want at most 128 letters, digits, _, . and -, starting with a letter or digit)", id)
	}
	return nil
}

// ReportNow sends a heartbeat, with the update report, as soon as the
// agent is connected (at once if it is): a deferred offer whose window
// opened asks imsd to confirm it.
func (a *Agent) ReportNow() { a.kickPerm() }

// updateWithdrawal checks imsd's withdrawal of an update offer (signed
// for this agent and that offer by a key it trusts: another agent's, or
// another offer's, does not verify) and hands it to
// Config.OnUpdateWithdrawal, once per offer. imsd sends it again until
// the agent's report answers the offer.
func (a *Agent) updateWithdrawal(ctx context.Context, w *agentv1.UpdateWithdrawal) {
	if a.cfg.OnUpdateWithdrawal == nil || a.withdrawals[w.OfferId] {
		return
	}
	if err := checkOfferID(w.OfferId); err != nil {
		a.log.Error("ignoring the withdrawal of an agent update offer", "reason", err)
		return
	}
	c := agentproto.UpdateWithdrawalClaims{KeyID: w.KeyId, InstallID: a.id.InstallID, AgentID: a.id.AgentID, OfferID: w.OfferId,
		Expires: time.UnixMilli(w.ExpireUnixMs)}
	if err := agentproto.VerifyUpdateWithdrawal(a.keys, &c, w.Signature, a.now()); err != nil {
		a.log.Error("ignoring the withdrawal of an agent update offer", "offer", w.OfferId, "reason", err)
		return
	}
	if !a.takeOffer("the withdrawal of an agent update offer", w.OfferId) {
		return
	}
	if a.withdrawals == nil || len(a.withdrawals) >= maxOffersRemembered {
		a.withdrawals = map[string]bool{}
	}
	a.withdrawals[w.OfferId] = true
	a.log.Info("imsd withdraws an agent update offer", "offer", w.OfferId)
	go func() {
		defer a.offersInFlight.Add(-1)
		a.cfg.OnUpdateWithdrawal(ctx, w.OfferId)
	}()
}
