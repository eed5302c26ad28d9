package agentapi

import (
	"context"
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentchannel"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// nextOffer skips messages other than an update offer (audit records).
func nextOffer(t *testing.T, cs *chanStream) *agentv1.UpdateOffer {
	t.Helper()
	return nextUpdate(t, cs, "offer", (*agentv1.ConnectResponse).GetUpdateOffer)
}

// nextWithdrawal skips messages other than an update withdrawal (audit
// records).
func nextWithdrawal(t *testing.T, cs *chanStream) *agentv1.UpdateWithdrawal {
	t.Helper()
	return nextUpdate(t, cs, "withdrawal", (*agentv1.ConnectResponse).GetUpdateWithdrawal)
}

// nextUpdate returns the next message get finds, skipping audit records.
func nextUpdate[T comparable](t *testing.T, cs *chanStream, what string, get func(*agentv1.ConnectResponse) T) T {
	t.Helper()
	var zero T
	for {
		m := cs.next(t)
		if v := get(m); v != zero {
			return v
		}
		if m.GetAudit() == nil {
			t.Fatalf("want an update %s, got %v", what, m)
		}
	}
}

// An offer recorded for the agent is sent, signed for it, after the
// welcome and after heartbeats, until the agent's update report answers
// it; the report is recorded.
func TestUpdateOfferSentUntilAnswered(t *testing.T) {
	e := newStreamEnv(t)
	ctx := context.Background()
	rel := "oci://r.example/byoc/agent@sha256:0123"
	ids, err := e.st.OfferAgentUpdate(ctx, "ins_1", store.UpdateOffer{ID: "uo_1", Release: rel, OfferedAt: e.clk.Now()}, "alice")
	if err != nil || len(ids) != 1 {
		t.Fatal(ids, err)
	}
	cs, _ := e.open(t, "inst-a")
	if cs.next(t).GetWelcome() == nil {
		t.Fatal("want a welcome")
	}
	o := nextOffer(t, cs)
	sk := e.svc.cfg.SigningKey
	c := agentproto.UpdateOfferClaims{KeyID: o.KeyId, InstallID: "ins_1", AgentID: e.agent, OfferID: o.OfferId, Release: o.Release, Expires: time.UnixMilli(o.ExpireUnixMs)}
	if err := agentproto.VerifyUpdateOffer(map[string]ed25519.PublicKey{sk.ID: sk.Public}, &c, o.Signature, e.clk.Now()); err != nil || o.Release != rel || o.OfferId != "uo_1" {
		t.Fatalf("offer %v: %v", o, err)
	}
	// Not answered: offered again.
	cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Heartbeat{Heartbeat: &agentv1.Heartbeat{Seq: 1,
		Update: &agentv1.UpdateReport{Mode: "manual"}}}}
	nextOffer(t, cs)
	// Answered: recorded, and no more offers.
	cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Heartbeat{Heartbeat: &agentv1.Heartbeat{Seq: 2,
		Update: &agentv1.UpdateReport{Mode: "manual", Last: &agentv1.UpdateDecision{Kind: "refused", Release: rel, OfferId: "uo_1", Reason: "manual"}}}}}
	cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Heartbeat{Heartbeat: &agentv1.Heartbeat{Seq: 3,
		Update: &agentv1.UpdateReport{Mode: "manual", Last: &agentv1.UpdateDecision{Kind: "refused", Release: rel, OfferId: "uo_1", Reason: "manual"}}}}}
	deadline := time.Now().Add(5 * time.Second)
	for {
		a, err := e.st.GetAgent(ctx, e.agent)
		if err == nil && a.Update != nil && a.Update.LastKind == "refused" && a.Update.LastOfferID == "uo_1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the report was not recorded: %+v", a.Update)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case m := <-cs.out:
		if m.GetUpdateOffer() != nil {
			t.Fatalf("offered again after the answer: %v", m)
		}
	case <-time.After(200 * time.Millisecond):
	}
}

// A withdrawn offer is sent as a withdrawal signed for the agent and the
// offer, after the welcome and after heartbeats (while the agent's report
// says it deferred the offer), until the report answers the offer
// otherwise (withdrawn); the offer itself is no longer sent.
func TestUpdateWithdrawalSentUntilAnswered(t *testing.T) {
	e := newStreamEnv(t)
	ctx := context.Background()
	rel := "oci://r.example/byoc/agent@sha256:0123"
	if _, err := e.st.OfferAgentUpdate(ctx, "ins_1", store.UpdateOffer{ID: "uo_1", Release: rel, OfferedAt: e.clk.Now()}, "alice"); err != nil {
		t.Fatal(err)
	}
	if id, agents, err := e.st.WithdrawAgentUpdate(ctx, "ins_1", "", "bob", "bad build", e.clk.Now()); err != nil || id != "uo_1" || len(agents) != 1 {
		t.Fatal(id, agents, err)
	}
	if _, _, err := e.st.WithdrawAgentUpdate(ctx, "ins_1", "", "bob", "again", e.clk.Now()); err == nil {
		t.Fatal("withdrawn twice")
	}
	cs, _ := e.open(t, "inst-a")
	if cs.next(t).GetWelcome() == nil {
		t.Fatal("want a welcome")
	}
	w := nextWithdrawal(t, cs)
	sk := e.svc.cfg.SigningKey
	c := agentproto.UpdateWithdrawalClaims{KeyID: w.KeyId, InstallID: "ins_1", AgentID: e.agent, OfferID: w.OfferId, Expires: time.UnixMilli(w.ExpireUnixMs)}
	if err := agentproto.VerifyUpdateWithdrawal(map[string]ed25519.PublicKey{sk.ID: sk.Public}, &c, w.Signature, e.clk.Now()); err != nil || w.OfferId != "uo_1" {
		t.Fatalf("withdrawal %v: %v", w, err)
	}
	deferred := &agentv1.UpdateDecision{Kind: "deferred", Release: rel, OfferId: "uo_1", Reason: "window"}
	cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Heartbeat{Heartbeat: &agentv1.Heartbeat{Seq: 1,
		Update: &agentv1.UpdateReport{Mode: "allow", Last: deferred}}}}
	nextWithdrawal(t, cs)
	withdrawn := &agentv1.UpdateDecision{Kind: "withdrawn", Release: rel, OfferId: "uo_1", Cause: "withdrawn"}
	for seq := range uint64(2) {
		cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Heartbeat{Heartbeat: &agentv1.Heartbeat{Seq: 2 + seq,
			Update: &agentv1.UpdateReport{Mode: "allow", Last: withdrawn}}}}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		a, err := e.st.GetAgent(ctx, e.agent)
		if err == nil && a.Update != nil && a.Update.LastKind == "withdrawn" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the report was not recorded: %+v", a.Update)
		}
		time.Sleep(10 * time.Millisecond)
	}
	noUpdateMessage(t, cs, "sent after the answer")
}

// noUpdateMessage fails if cs carries an update offer or withdrawal in
// the next 300 ms.
func noUpdateMessage(t *testing.T, cs *chanStream, what string) {
	t.Helper()
	for {
		select {
		case m := <-cs.out:
			if m.GetSealed() != nil {
				var err error
				if m, err = agentchannel.OpenResponse(cs.agent, m); err != nil {
					t.Fatal(err)
				}
			}
			if m.GetUpdateWithdrawal() != nil || m.GetUpdateOffer() != nil {
				t.Fatalf("%s: %v", what, m)
			}
		case <-time.After(300 * time.Millisecond):
			return
		}
	}
}

// An agent whose window opened on a deferred offer asks imsd to confirm
// it (the report's confirm_offer_id): imsd reads the offer from its store
// (not the stream's copy: a withdrawal through another replica, which
// this stream's hub never heard of, is answered at once) and sends the
// offer again while it stands, its signed withdrawal otherwise, or for an
// offer it does not hold. Offers ask for confirmation (confirm); an offer
// sent again reuses its signature.
func TestUpdateOfferConfirmedWhenAsked(t *testing.T) {
	e := newStreamEnv(t)
	ctx := context.Background()
	rel := "oci://r.example/byoc/agent@sha256:0123"
	if _, err := e.st.OfferAgentUpdate(ctx, "ins_1", store.UpdateOffer{ID: "uo_1", Release: rel, OfferedAt: e.clk.Now()}, "alice"); err != nil {
		t.Fatal(err)
	}
	cs, _ := e.open(t, "inst-a")
	if cs.next(t).GetWelcome() == nil {
		t.Fatal("want a welcome")
	}
	first := nextOffer(t, cs)
	if !first.Confirm {
		t.Fatalf("the offer does not ask for confirmation: %v", first)
	}
	deferred := &agentv1.UpdateDecision{Kind: "deferred", Release: rel, OfferId: "uo_1", Reason: "window", Cause: "window"}
	beat := func(seq uint64, confirm string) {
		cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Heartbeat{Heartbeat: &agentv1.Heartbeat{Seq: seq,
			Update: &agentv1.UpdateReport{Mode: "allow", Last: deferred, ConfirmOfferId: confirm}}}}
	}
	beat(1, "")
	noUpdateMessage(t, cs, "a deferred offer sent again unasked")
	e.clk.Add(10 * time.Minute) // within half the signature's life: the same one
	beat(2, "uo_1")
	again := nextOffer(t, cs)
	if again.OfferId != "uo_1" || again.Release != rel || string(again.Signature) != string(first.Signature) {
		t.Fatalf("confirmation %v, first offer %v", again, first)
	}
	// Withdrawn through "another replica": the store only.
	if _, _, err := e.st.WithdrawAgentUpdate(ctx, "ins_1", "", "bob", "bad build", e.clk.Now()); err != nil {
		t.Fatal(err)
	}
	beat(3, "uo_1")
	w := nextWithdrawal(t, cs)
	sk := e.svc.cfg.SigningKey
	c := agentproto.UpdateWithdrawalClaims{KeyID: w.KeyId, InstallID: "ins_1", AgentID: e.agent, OfferID: w.OfferId, Expires: time.UnixMilli(w.ExpireUnixMs)}
	if err := agentproto.VerifyUpdateWithdrawal(map[string]ed25519.PublicKey{sk.ID: sk.Public}, &c, w.Signature, e.clk.Now()); err != nil || w.OfferId != "uo_1" {
		t.Fatalf("withdrawal %v: %v", w, err)
	}
	// An offer imsd does not hold, asked at the hello: withdrawn.
	cs2 := newChanStream()
	go func() { _ = e.svc.Serve(context.Background(), cs2) }()
	t.Cleanup(func() { close(cs2.closed) })
	ch := cs2.next(t).GetChallenge()
	e.hello(t, cs2, ch, &agentv1.Hello{AgentId: e.agent, Signature: agentproto.SignChallenge(e.key, e.agent, ch.Nonce), Capacity: 2,
		Instance: "inst-b", Update: &agentv1.UpdateReport{Mode: "allow",
			Last: &agentv1.UpdateDecision{Kind: "deferred", Release: rel, OfferId: "uo_9"}, ConfirmOfferId: "uo_9"}})
	if cs2.next(t).GetWelcome() == nil {
		t.Fatal("want a welcome")
	}
	if w := nextWithdrawal(t, cs2); w.OfferId != "uo_9" {
		t.Fatalf("withdrawal of %s", w.OfferId)
	}
}
