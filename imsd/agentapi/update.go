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
	if c.svc.hub.Offers() == c.offerSeen && now.Sub(c.offerReadAt) < offerPoll {
		return c.sendOffer(now)
	}
	if err := c.readOffer(ctx, now); err != nil {
		c.logger().WarnContext(ctx, "read agent update offer", "err", err)
		return nil
	}
	return c.sendOffer(now)
}

// readOffer reads the agent's offer from the store into the stream's copy.
func (c *conn) readOffer(ctx context.Context, now time.Time) error {
	n := c.svc.hub.Offers()
	a, err := c.svc.store.GetAgent(ctx, c.agent.ID)
	if err != nil {
		return err
	}
	c.offerSeen, c.offerReadAt = n, now
	c.agent.UpdateOffer = a.UpdateOffer
	return nil
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
		return c.sendWithdrawal(o.ID, now)
	}
	if u != nil && u.LastOfferID == o.ID {
		return nil
	}
	return c.sendOfferSigned(o, now)
}

// confirmOffer answers an agent whose report asks imsd to confirm the
// offer its customer's window deferred, now that the window is open
// (UpdateReport.confirm_offer_id): it reads the agent's offer from the
// store (not the stream's copy, which may be up to offerPoll old: a
// cancel through another replica), sends that offer again if it still
// stands, and its withdrawal otherwise (withdrawn, or replaced by another
// offer, or gone), then anything else sendOffer sends. The agent applies
// the deferred offer only on this answer. It reports whether the report
// asked (then the caller need not refresh the offer). c.mu is held.
func (c *conn) confirmOffer(ctx context.Context, p *agentv1.UpdateReport, now time.Time) (bool, error) {
	id := p.GetConfirmOfferId()
	if id == "" {
		return false, nil
	}
	if len(id) > 64 {
		return true, nil // no offer id is this long (store.NewOfferID)
	}
	if err := c.readOffer(ctx, now); err != nil {
		// Unanswered, the agent asks again at its next report.
		c.logger().WarnContext(ctx, "read agent update offer to confirm it", "offer", id, "err", err)
		return true, nil
	}
	o := c.agent.UpdateOffer
	if o != nil && o.ID == id && !o.Withdrawn() {
		c.logger().InfoContext(ctx, "agent update offer confirmed: the agent's update window is open", "offer", id)
		return true, c.sendOfferSigned(o, now)
	}
	c.logger().InfoContext(ctx, "agent asked to confirm an update offer that no longer stands: withdrawn", "offer", id)
	if err := c.sendWithdrawal(id, now); err != nil {
		return true, err
	}
	if o != nil && o.ID == id {
		return true, nil
	}
	return true, c.sendOffer(now)
}

// sendOfferSigned sends offer o signed for the agent. The signature is
// kept and sent again until half its life is left (an agent whose report
// leaves an offer unanswered gets it after each heartbeat).
func (c *conn) sendOfferSigned(o *store.UpdateOffer, now time.Time) error {
	s := c.signed(o.ID, o.Release, false, now)
	return c.send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_UpdateOffer{UpdateOffer: &agentv1.UpdateOffer{
		OfferId: o.ID, Release: o.Release, KeyId: s.keyID, ExpireUnixMs: s.expires.UnixMilli(), Signature: s.sig, Confirm: true}}})
}

// sendWithdrawal sends the signed withdrawal of offer id, kept as
// sendOfferSigned keeps an offer's.
func (c *conn) sendWithdrawal(id string, now time.Time) error {
	s := c.signed(id, "", true, now)
	return c.send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_UpdateWithdrawal{UpdateWithdrawal: &agentv1.UpdateWithdrawal{
		OfferId: id, KeyId: s.keyID, ExpireUnixMs: s.expires.UnixMilli(), Signature: s.sig}}})
}

// signedUpdate is the last offer or withdrawal signed for a stream's
// agent.
type signedUpdate struct {
	offerID, release, keyID string
	withdrawal              bool
	expires                 time.Time
	sig                     []byte
}

// signed returns the signature of offer id (release) or of its
// withdrawal for the stream's agent: the last one made, while it is for
// the same thing, by the current key, with more than half of offerLife
// left; a new one otherwise.
func (c *conn) signed(id, release string, withdrawal bool, now time.Time) *signedUpdate {
	k := c.svc.cfg.SigningKey
	if s := c.lastSigned; s != nil && s.offerID == id && s.release == release && s.withdrawal == withdrawal && s.keyID == k.ID &&
		s.expires.Sub(now) > offerLife/2 {
		return s
	}
	s := &signedUpdate{offerID: id, release: release, withdrawal: withdrawal, expires: now.Add(offerLife)}
	if withdrawal {
		claims := agentproto.UpdateWithdrawalClaims{InstallID: c.agent.InstallID, AgentID: c.agent.ID, OfferID: id, Expires: s.expires}
		s.sig, s.keyID = k.SignWithdrawal(&claims), claims.KeyID
	} else {
		claims := agentproto.UpdateOfferClaims{InstallID: c.agent.InstallID, AgentID: c.agent.ID, OfferID: id, Release: release, Expires: s.expires}
		s.sig, s.keyID = k.SignOffer(&claims), claims.KeyID
	}
	c.lastSigned = s
	return s
}
