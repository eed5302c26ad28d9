package agentproto

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"testing"
	"time"
)

func TestUpdateOfferSignature(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	keys := map[string]ed25519.PublicKey{KeyID(pub): pub}
	now := time.Unix(1_800_000_000, 0)
	c := UpdateOfferClaims{KeyID: KeyID(pub), InstallID: "in1", AgentID: "ag1", OfferID: "of1",
		Release: "oci://r.example/agent@sha256:0123", Expires: now.Add(time.Hour)}
	sig := SignUpdateOffer(priv, &c)
	if err := VerifyUpdateOffer(keys, &c, sig, now); err != nil {
		t.Fatal(err)
	}
	other := c
	other.AgentID = "ag2"
	if err := VerifyUpdateOffer(keys, &other, sig, now); err == nil {
		t.Error("an offer signed for another agent verified")
	}
	other = c
	other.Release += "x"
	if err := VerifyUpdateOffer(keys, &other, sig, now); err == nil {
		t.Error("a changed release verified")
	}
	if err := VerifyUpdateOffer(keys, &c, sig, now.Add(2*time.Hour)); !errors.Is(err, ErrExpired) {
		t.Errorf("expired: %v", err)
	}
	if err := VerifyUpdateOffer(keys, &c, nil, now); !errors.Is(err, ErrUnsigned) {
		t.Errorf("unsigned: %v", err)
	}
	// A job signature over the same key never passes for an offer.
	j := JobClaims{KeyID: c.KeyID, InstallID: "in1", AgentID: "ag1", JobID: "of1", Expires: c.Expires}
	if err := VerifyUpdateOffer(keys, &c, SignJob(priv, &j), now); err == nil {
		t.Error("a job signature verified as an offer")
	}
}

func TestUpdateWithdrawalSignature(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	keys := map[string]ed25519.PublicKey{KeyID(pub): pub}
	now := time.Unix(1_800_000_000, 0)
	c := UpdateWithdrawalClaims{KeyID: KeyID(pub), InstallID: "in1", AgentID: "ag1", OfferID: "of1", Expires: now.Add(time.Hour)}
	sig := SignUpdateWithdrawal(priv, &c)
	if err := VerifyUpdateWithdrawal(keys, &c, sig, now); err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(*UpdateWithdrawalClaims){
		"another agent":   func(o *UpdateWithdrawalClaims) { o.AgentID = "ag2" },
		"another install": func(o *UpdateWithdrawalClaims) { o.InstallID = "in2" },
		"another offer":   func(o *UpdateWithdrawalClaims) { o.OfferID = "of2" },
		"a later expiry":  func(o *UpdateWithdrawalClaims) { o.Expires = o.Expires.Add(time.Hour) },
	} {
		other := c
		change(&other)
		if err := VerifyUpdateWithdrawal(keys, &other, sig, now); err == nil {
			t.Errorf("a withdrawal changed to %s verified", name)
		}
	}
	if err := VerifyUpdateWithdrawal(keys, &c, sig, now.Add(2*time.Hour)); !errors.Is(err, ErrExpired) {
		t.Errorf("expired: %v", err)
	}
	if err := VerifyUpdateWithdrawal(keys, &c, nil, now); !errors.Is(err, ErrUnsigned) {
		t.Errorf("unsigned: %v", err)
	}
	// An offer's signature of the same ids never passes for a withdrawal.
	o := UpdateOfferClaims{KeyID: c.KeyID, InstallID: "in1", AgentID: "ag1", OfferID: "of1", Expires: c.Expires}
	if err := VerifyUpdateWithdrawal(keys, &c, SignUpdateOffer(priv, &o), now); err == nil {
		t.Error("an offer's signature verified as a withdrawal")
	}
}
