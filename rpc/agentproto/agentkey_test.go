package agentproto

import (
	"crypto/ed25519"
	"testing"
)

// An agent's key rotation verifies only as signed: by the current key
// (endorsement) and the next (proof), for that agent, with two distinct
// keys; swapping any part breaks it.
func TestAgentKeyRotation(t *testing.T) {
	_, cur, _ := ed25519.GenerateKey(nil)
	_, next, _ := ed25519.GenerateKey(nil)
	_, evil, _ := ed25519.GenerateKey(nil)
	r := RotateAgentKey("ag-1", cur, next)
	if !r.Verify() {
		t.Fatal("a rotation does not verify")
	}
	for name, bad := range map[string]func(AgentKeyRotation) AgentKeyRotation{
		"other agent":          func(r AgentKeyRotation) AgentKeyRotation { r.AgentID = "ag-2"; return r },
		"next swapped":         func(r AgentKeyRotation) AgentKeyRotation { r.Next = evil.Public().(ed25519.PublicKey); return r },
		"current swapped":      func(r AgentKeyRotation) AgentKeyRotation { r.Current = evil.Public().(ed25519.PublicKey); return r },
		"endorsement as proof": func(r AgentKeyRotation) AgentKeyRotation { r.Proof = r.Endorsement; return r },
		"no proof":             func(r AgentKeyRotation) AgentKeyRotation { r.Proof = nil; return r },
		"short key":            func(r AgentKeyRotation) AgentKeyRotation { r.Next = r.Next[:31]; return r },
	} {
		if bad(r).Verify() {
			t.Errorf("%s: verifies", name)
		}
	}
	// Not endorsed by the current key: the holder of a key it does not
	// own cannot rotate it.
	forged := RotateAgentKey("ag-1", evil, next)
	forged.Current = cur.Public().(ed25519.PublicKey)
	if forged.Verify() {
		t.Error("a rotation endorsed by another key verifies")
	}
	if same := RotateAgentKey("ag-1", cur, cur); same.Verify() {
		t.Error("a rotation to the same key verifies")
	}
}
