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
