package agentproto

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"
)

func TestBreakGlassDecisionSignature(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	otherPub, _, _ := ed25519.GenerateKey(rand.Reader)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	d := BreakGlassDecision{GrantID: "g1", AgentID: "a1", InstallID: "i1", Decision: DecisionApprove, Role: "admin", By: "alice", At: at, ExpiresAt: at.Add(time.Hour)}
	st, sig, err := SignBreakGlassDecision(key, d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyBreakGlassDecision(pub, st, sig)
	if err != nil || got != d {
		t.Fatalf("verify = %+v, %v; want %+v", got, err, d)
	}
	if _, err := VerifyBreakGlassDecision(otherPub, st, sig); err == nil {
		t.Error("another agent's key verified the decision")
	}
	// imsd extending the grant changes the statement, so the signature fails.
	forged := []byte(strings.Replace(string(st), "T04:04:05Z", "T09:04:05Z", 1))
	if string(forged) == string(st) {
		t.Fatal("test did not change the statement")
	}
	if _, err := VerifyBreakGlassDecision(pub, forged, sig); err == nil {
		t.Error("an extended statement verified")
	}
	if _, _, err := SignBreakGlassDecision(key, BreakGlassDecision{GrantID: "g", AgentID: "a", InstallID: "i", Decision: "approve", By: "x", At: at}); err == nil {
		t.Error("an approval without expiry was signed")
	}
	lsig := SignListBreakGlass(key, "a1", at)
	if !VerifyListBreakGlass(pub, "a1", at, lsig) || VerifyListBreakGlass(pub, "a1", at.Add(time.Second), lsig) || VerifyListBreakGlass(pub, "a2", at, lsig) {
		t.Error("list signature checks wrong")
	}
}
