package agentapi

import (
	"context"
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// imsd records only decisions the install's own agent signed: another key,
// another install, the requester deciding, a time far from imsd's clock
// and an approval longer than asked are refused, and nothing is recorded.
func TestDecideBreakGlassChecksTheAgentsSignature(t *testing.T) {
	e := newStreamEnv(t)
	ctx := context.Background()
	now := e.clk.Now()
	if err := e.st.CreateBreakGlassRequest(ctx, store.BreakGlassGrant{ID: "bg_1", InstallID: "ins_1", Role: "debugger",
		RequestedBy: "ops", RequestedAt: now, Duration: time.Hour, RequestExpiresAt: now.Add(30 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	_, otherKey, _ := ed25519.GenerateKey(nil)
	ok := agentproto.BreakGlassDecision{GrantID: "bg_1", AgentID: e.agent, InstallID: "ins_1", Decision: agentproto.DecisionApprove,
		Role: "debugger", By: "alice", At: now, ExpiresAt: now.Add(30 * time.Minute)}
	decide := func(key ed25519.PrivateKey, d agentproto.BreakGlassDecision) error {
		st, sig, err := agentproto.SignBreakGlassDecision(key, d)
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.svc.DecideBreakGlass(ctx, connect.NewRequest(&agentv1.DecideBreakGlassRequest{AgentId: e.agent, Statement: st, Signature: sig}))
		return err
	}
	mod := func(f func(*agentproto.BreakGlassDecision)) agentproto.BreakGlassDecision { d := ok; f(&d); return d }
	for _, c := range []struct {
		name string
		key  ed25519.PrivateKey
		d    agentproto.BreakGlassDecision
		want string
	}{
		{"another key", otherKey, ok, "signature is not the agent's"},
		{"another install", e.key, mod(func(d *agentproto.BreakGlassDecision) { d.InstallID = "ins_2" }), "its own install only"},
		{"the requester", e.key, mod(func(d *agentproto.BreakGlassDecision) { d.By = "ops" }), "cannot decide it too"},
		{"an old statement", e.key, mod(func(d *agentproto.BreakGlassDecision) { d.At = now.Add(-time.Hour); d.ExpiresAt = now }), "from imsd's clock"},
		{"longer than asked", e.key, mod(func(d *agentproto.BreakGlassDecision) { d.ExpiresAt = now.Add(2 * time.Hour) }), "longer than the 1h0m0s requested"},
	} {
		err := decide(c.key, c.d)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if g, _ := e.st.GetBreakGlassGrant(ctx, "bg_1"); g.State != store.GrantPending {
		t.Fatalf("after the refused decisions: %s", g.State)
	}
	if err := decide(e.key, ok); err != nil {
		t.Fatal(err)
	}
	at := e.clk.Now()
	r, err := e.svc.ListBreakGlass(ctx, connect.NewRequest(&agentv1.ListBreakGlassRequest{AgentId: e.agent, Time: timestamppb.New(at),
		Signature: agentproto.SignListBreakGlass(e.key, e.agent, at)}))
	if err != nil || len(r.Msg.Grants) != 1 || r.Msg.Grants[0].State != "approved" || r.Msg.Grants[0].DecidedBy != "alice" {
		t.Fatalf("list: %v, %v", r, err)
	}
	if _, err := e.svc.ListBreakGlass(ctx, connect.NewRequest(&agentv1.ListBreakGlassRequest{AgentId: e.agent, Time: timestamppb.New(at),
		Signature: agentproto.SignListBreakGlass(otherKey, e.agent, at)})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("list signed by another key: %v", err)
	}
}
