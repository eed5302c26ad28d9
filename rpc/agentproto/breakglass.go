package agentproto

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Break-glass decisions. The customer's admin decides a break-glass
// request on the agent's side (agentd breakglass); the agent signs the
// decision with its own key and sends the statement and signature to
// imsd, which verifies and keeps both. The statement's bytes are what is
// signed, so imsd parses exactly what it verified; the agent enforces
// only grants it approved itself (its state dir), so imsd can neither
// mint a grant nor extend one.

const (
	decisionContext = "byoc break-glass decision v1\x00"
	listContext     = "byoc break-glass list v1\x00"
)

// The decisions a statement records.
const (
	DecisionApprove = "approve"
	DecisionDeny    = "deny"
	DecisionRevoke  = "revoke"
)

// BreakGlassDecision is the customer's decision on one break-glass
// request or grant.
type BreakGlassDecision struct {
	GrantID   string `json:"grant_id"`
	AgentID   string `json:"agent_id"`
	InstallID string `json:"install_id"`
	// Decision is approve, deny or revoke.
	Decision string `json:"decision"`
	Role     string `json:"role,omitempty"`
	// By is the local user who decided; never the requester.
	By     string    `json:"by"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason,omitempty"`
	// ExpiresAt is when an approved grant ends.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// Check reports what is missing or wrong in d.
func (d BreakGlassDecision) Check() error {
	switch {
	case d.GrantID == "" || d.AgentID == "" || d.InstallID == "":
		return fmt.Errorf("break-glass decision: grant_id, agent_id and install_id are required")
	case d.Decision != DecisionApprove && d.Decision != DecisionDeny && d.Decision != DecisionRevoke:
		return fmt.Errorf("break-glass decision: decision %q: want approve, deny or revoke", d.Decision)
	case d.By == "":
		return fmt.Errorf("break-glass decision: by is required")
	case d.At.IsZero():
		return fmt.Errorf("break-glass decision: at is required")
	case d.Decision == DecisionApprove && !d.ExpiresAt.After(d.At):
		return fmt.Errorf("break-glass decision: an approval needs expires_at after at")
	}
	return nil
}

// SignBreakGlassDecision encodes d and signs it with the agent's key.
func SignBreakGlassDecision(key ed25519.PrivateKey, d BreakGlassDecision) (statement, sig []byte, err error) {
	if err := d.Check(); err != nil {
		return nil, nil, err
	}
	statement, err = json.Marshal(d)
	if err != nil {
		return nil, nil, err
	}
	return statement, ed25519.Sign(key, append([]byte(decisionContext), statement...)), nil
}

// VerifyBreakGlassDecision checks sig with the agent's public key and
// returns the statement's decision.
func VerifyBreakGlassDecision(pub, statement, sig []byte) (BreakGlassDecision, error) {
	if len(pub) != ed25519.PublicKeySize || !ed25519.Verify(ed25519.PublicKey(pub), append([]byte(decisionContext), statement...), sig) {
		return BreakGlassDecision{}, fmt.Errorf("break-glass decision: the signature is not the agent's")
	}
	var d BreakGlassDecision
	if err := json.Unmarshal(statement, &d); err != nil {
		return BreakGlassDecision{}, fmt.Errorf("break-glass decision: %w", err)
	}
	return d, d.Check()
}

// ListBreakGlassMessage is what an agent signs to list its install's
// break-glass requests at t.
func ListBreakGlassMessage(agentID string, t time.Time) []byte {
	return []byte(listContext + agentID + "\x00" + strconv.FormatInt(t.UnixNano(), 10))
}

// SignListBreakGlass signs a list call at t.
func SignListBreakGlass(key ed25519.PrivateKey, agentID string, t time.Time) []byte {
	return ed25519.Sign(key, ListBreakGlassMessage(agentID, t))
}

// VerifyListBreakGlass reports whether sig is the agent's signature of a
// list call at t.
func VerifyListBreakGlass(pub []byte, agentID string, t time.Time, sig []byte) bool {
	return len(pub) == ed25519.PublicKeySize && ed25519.Verify(ed25519.PublicKey(pub), ListBreakGlassMessage(agentID, t), sig)
}
