package agent

import (
	"context"
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
	if a.offers == nil {
		a.offers = map[string]bool{}
	}
	a.offers[o.OfferId] = true
	a.log.Info("imsd offers an agent release", "offer", o.OfferId, "release", o.Release, "confirm", o.Confirm)
	go a.cfg.OnUpdateOffer(ctx, o.OfferId, o.Release, o.Confirm)
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
	c := agentproto.UpdateWithdrawalClaims{KeyID: w.KeyId, InstallID: a.id.InstallID, AgentID: a.id.AgentID, OfferID: w.OfferId,
		Expires: time.UnixMilli(w.ExpireUnixMs)}
	if err := agentproto.VerifyUpdateWithdrawal(a.keys, &c, w.Signature, a.now()); err != nil {
		a.log.Error("ignoring the withdrawal of an agent update offer", "offer", w.OfferId, "reason", err)
		return
	}
	if a.withdrawals == nil {
		a.withdrawals = map[string]bool{}
	}
	a.withdrawals[w.OfferId] = true
	a.log.Info("imsd withdraws an agent update offer", "offer", w.OfferId)
	go a.cfg.OnUpdateWithdrawal(ctx, w.OfferId)
}
