package agentapi

// Agent updates: the agent reports its update policy and latest update
// decision (hello, heartbeats); imsd records them for people to see, and
// sends the agent the release an operator offered (byoc agent update),
// signed, until the agent's report answers that offer. The agent alone
// decides by its customer's policy. An offer imsd withdrew (a cancelled
// rollout, a missed deadline) is sent as a signed withdrawal until the
// report answers it.

import (
	"context"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// offerLife is how long an offer's signature holds; imsd signs it again
// at each send.
const offerLife = time.Hour

// offerPoll is how often a stream reads its agent's offer again without
// news from this imsd's hub (an offer recorded through another replica).
const offerPoll = time.Minute

// reportUpdate records the update report, when it differs from what is
// recorded. An agent that reports none (an older agentd) leaves it as it
// was. c.mu is held.
func (c *conn) reportUpdate(ctx context.Context, p *agentv1.UpdateReport, now time.Time) {
	if p == nil {
		return
	}
	u := store.AgentUpdate{Mode: p.Mode, Pin: p.Pin, Allow: p.Allow, Window: p.Window}
	if l := p.Last; l != nil {
		u.LastKind, u.LastRelease, u.LastOfferID, u.LastVersion = truncate(l.Kind, 32), truncate(l.Release, 512), truncate(l.OfferId, 64), truncate(l.Version, 64)
		u.LastReason, u.LastCause = truncate(l.Reason, 1024), truncate(l.Cause, 32)
		if l.Time != nil {
			u.LastAt = l.Time.AsTime().UTC()
		}
	}
	u.Mode, u.Pin, u.Allow, u.Window = truncate(u.Mode, 16), truncate(u.Pin, 64), truncate(u.Allow, 256), truncate(u.Window, 256)
	old := c.agent.Update
	if old != nil && old.SameReport(u) {
		return
	}
	decided := old == nil || !old.SameDecision(u)
	if err := c.svc.store.SetAgentUpdate(ctx, c.agent.ID, u, decided, now); err != nil {
		c.logger().WarnContext(ctx, "record agent update report", "err", err)
		return
	}
	if decided && u.LastKind != "" {
		c.logger().InfoContext(ctx, "agent update decision", "kind", u.LastKind, "release", u.LastRelease, "version", u.LastVersion, "reason", u.LastReason)
	}
	u.ReportedAt = now
	c.agent.Update = &u
	c.svc.hub.FleetChanged()
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// refreshOffer reads the agent's offer again when this imsd recorded an
// offer since the last read, or offerPoll passed, and sends it if the
// agent has not answered it.
func (c *conn) refreshOffer(ctx context.Context, now time.Time) error {
	n := c.svc.hub.Offers()
	if n == c.offerSeen && now.Sub(c.offerReadAt) < offerPoll {
		return c.sendOffer(now)
	}
	a, err := c.svc.store.GetAgent(ctx, c.agent.ID)
	if err != nil {
		c.logger().WarnContext(ctx, "read agent update offer", "err", err)
		return nil
	}
	c.offerSeen, c.offerReadAt = n, now
	c.agent.UpdateOffer = a.UpdateOffer
	return c.sendOffer(now)
}

// sendOffer sends the agent's offer, signed for it, unless there is none
// or the agent's report answers it already. A withdrawn offer is sent as
// its signed withdrawal instead, until the report answers the offer with
// anything but deferred (withdrawn: the agent dropped it; applied or
// later: it took it, and an applied update is not undone).
func (c *conn) sendOffer(now time.Time) error {
	o := c.agent.UpdateOffer
	if o == nil {
		return nil
	}
	u := c.agent.Update
	if o.Withdrawn() {
		if u != nil && u.LastOfferID == o.ID && u.LastKind != "deferred" {
			return nil
		}
		claims := agentproto.UpdateWithdrawalClaims{InstallID: c.agent.InstallID, AgentID: c.agent.ID, OfferID: o.ID, Expires: now.Add(offerLife)}
		sig := c.svc.cfg.SigningKey.SignWithdrawal(&claims)
		return c.send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_UpdateWithdrawal{UpdateWithdrawal: &agentv1.UpdateWithdrawal{
			OfferId: o.ID, KeyId: claims.KeyID, ExpireUnixMs: claims.Expires.UnixMilli(), Signature: sig}}})
	}
	if u != nil && u.LastOfferID == o.ID {
		return nil
	}
	claims := agentproto.UpdateOfferClaims{InstallID: c.agent.InstallID, AgentID: c.agent.ID, OfferID: o.ID, Release: o.Release,
		Expires: now.Add(offerLife)}
	sig := c.svc.cfg.SigningKey.SignOffer(&claims)
	return c.send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_UpdateOffer{UpdateOffer: &agentv1.UpdateOffer{
		OfferId: o.ID, Release: o.Release, KeyId: claims.KeyID, ExpireUnixMs: claims.Expires.UnixMilli(), Signature: sig}}})
}
