package agent

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"log/slog"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// A withdrawal reaches OnUpdateWithdrawal only when imsd signed it for
// this agent and that offer, once per offer: one signed for another
// offer, another agent, by an unknown key, unsigned or expired is
// refused.
func TestUpdateWithdrawalVerified(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	_, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Unix(1_800_000_000, 0)
	got := make(chan string, 10)
	a := &Agent{cfg: Config{Now: func() time.Time { return now },
		OnUpdateWithdrawal: func(_ context.Context, offerID string) { got <- offerID }},
		id:   identity.Identity{InstallID: "in1", AgentID: "ag1"},
		keys: map[string]ed25519.PublicKey{agentproto.KeyID(pub): pub}, log: slog.New(slog.DiscardHandler)}
	sign := func(key ed25519.PrivateKey, install, agent, offer string, expires time.Time) *agentv1.UpdateWithdrawal {
		c := agentproto.UpdateWithdrawalClaims{KeyID: agentproto.KeyID(pub), InstallID: install, AgentID: agent, OfferID: offer, Expires: expires}
		return &agentv1.UpdateWithdrawal{OfferId: offer, KeyId: c.KeyID, ExpireUnixMs: expires.UnixMilli(), Signature: agentproto.SignUpdateWithdrawal(key, &c)}
	}
	later := now.Add(time.Hour)
	forOther := sign(priv, "in1", "ag1", "uo_2", later)
	forOther.OfferId = "uo_1" // another offer's withdrawal, renamed
	unsigned := sign(priv, "in1", "ag1", "uo_1", later)
	unsigned.Signature = nil
	for name, w := range map[string]*agentv1.UpdateWithdrawal{
		"another offer's":  forOther,
		"another agent's":  sign(priv, "in1", "ag2", "uo_1", later),
		"another install":  sign(priv, "in2", "ag1", "uo_1", later),
		"an unknown key's": sign(otherPriv, "in1", "ag1", "uo_1", later),
		"expired":          sign(priv, "in1", "ag1", "uo_1", now.Add(-time.Second)),
		"unsigned":         unsigned,
	} {
		a.updateWithdrawal(t.Context(), w)
		select {
		case id := <-got:
			t.Fatalf("%s withdrawal accepted (offer %s)", name, id)
		case <-time.After(20 * time.Millisecond):
		}
	}
	w := sign(priv, "in1", "ag1", "uo_1", later)
	a.updateWithdrawal(t.Context(), w)
	select {
	case id := <-got:
		if id != "uo_1" {
			t.Fatalf("withdrew %s", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a valid withdrawal was not handed on")
	}
	a.updateWithdrawal(t.Context(), w)
	select {
	case id := <-got:
		t.Fatalf("handed on twice: %s", id)
	case <-time.After(20 * time.Millisecond):
	}
}

// An offer is handed to OnUpdateOffer once, with its confirm flag; imsd
// sending it again is handed on again only while the agent's report asks
// imsd to confirm that offer (its window opened on the deferred offer),
// and only if it verifies.
func TestUpdateOfferHandedAgainAsConfirmation(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Unix(1_800_000_000, 0)
	type handed struct {
		id      string
		confirm bool
	}
	got := make(chan handed, 10)
	confirming := ""
	a := &Agent{cfg: Config{Now: func() time.Time { return now },
		OnUpdateOffer: func(_ context.Context, offerID, _ string, confirm bool) { got <- handed{offerID, confirm} },
		UpdateReport:  func() *agentv1.UpdateReport { return &agentv1.UpdateReport{ConfirmOfferId: confirming} }},
		id:   identity.Identity{InstallID: "in1", AgentID: "ag1"},
		keys: map[string]ed25519.PublicKey{agentproto.KeyID(pub): pub}, log: slog.New(slog.DiscardHandler)}
	offer := func(id string) *agentv1.UpdateOffer {
		c := agentproto.UpdateOfferClaims{KeyID: agentproto.KeyID(pub), InstallID: "in1", AgentID: "ag1", OfferID: id,
			Release: "oci://r.example/byoc/agent@sha256:" + id, Expires: now.Add(time.Hour)}
		return &agentv1.UpdateOffer{OfferId: id, Release: c.Release, KeyId: c.KeyID, ExpireUnixMs: c.Expires.UnixMilli(),
			Signature: agentproto.SignUpdateOffer(priv, &c), Confirm: true}
	}
	expect := func(what string, want *handed) {
		t.Helper()
		select {
		case h := <-got:
			if want == nil || h != *want {
				t.Fatalf("%s: handed %+v, want %+v", what, h, want)
			}
		case <-time.After(50 * time.Millisecond):
			if want != nil {
				t.Fatalf("%s: not handed on", what)
			}
		}
	}
	a.updateOffer(t.Context(), offer("uo_1"))
	expect("the offer", &handed{"uo_1", true})
	a.updateOffer(t.Context(), offer("uo_1"))
	expect("sent again, no confirmation asked", nil)
	confirming = "uo_2"
	a.updateOffer(t.Context(), offer("uo_1"))
	expect("sent again, another offer's confirmation asked", nil)
	confirming = "uo_1"
	forged := offer("uo_1")
	forged.Signature[0] ^= 1
	a.updateOffer(t.Context(), forged)
	expect("a forged confirmation", nil)
	a.updateOffer(t.Context(), offer("uo_1"))
	expect("imsd's confirmation", &handed{"uo_1", true})
}
