package agentapi

import (
	"context"
	"crypto/ed25519"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/rpc/agentchannel"

	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// The agent's key rotation through its hello: a next key endorsed by the
// current key is recorded and named in the welcome (one not endorsed is
// not); either key is served until the agent's first hello under the
// next, which makes it the only key: the old one is refused from then on.
func TestAgentKeyRotationThroughHello(t *testing.T) {
	e := newStreamEnv(t)
	ctx := context.Background()
	stream := func(hello func(*agentv1.Challenge) *agentv1.Hello) (*chanStream, chan error) {
		cs := newChanStream()
		done := make(chan error, 1)
		go func() { done <- e.svc.Serve(ctx, cs) }()
		ch := cs.next(t).GetChallenge()
		e.hello(t, cs, ch, hello(ch))
		t.Cleanup(func() {
			select {
			case <-cs.closed:
			default:
				close(cs.closed)
			}
		})
		return cs, done
	}
	helloWith := func(next *agentv1.AgentKeyRotation) func(*agentv1.Challenge) *agentv1.Hello {
		return func(ch *agentv1.Challenge) *agentv1.Hello {
			return &agentv1.Hello{AgentId: e.agent, Signature: agentproto.SignChallenge(e.key, e.agent, ch.Nonce), Capacity: 1, NextKey: next}
		}
	}
	end := func(cs *chanStream, done chan error) {
		close(cs.closed)
		<-done
	}
	old := e.key
	_, next, _ := ed25519.GenerateKey(nil)
	_, evil, _ := ed25519.GenerateKey(nil)

	// Not endorsed by the agent's key: not recorded.
	forged := agentproto.RotateAgentKey(e.agent, evil, next)
	cs, done := stream(helloWith(&agentv1.AgentKeyRotation{PublicKey: forged.Next, Endorsement: forged.Endorsement, Proof: forged.Proof}))
	if w := cs.next(t).GetWelcome(); w == nil || w.NextKeyId != "" {
		t.Fatalf("welcome after a forged rotation: %v", w)
	}
	end(cs, done)
	if a, _ := e.st.GetAgent(ctx, e.agent); len(a.NextPublicKey) != 0 {
		t.Fatal("a forged next key was recorded")
	}

	r := agentproto.RotateAgentKey(e.agent, old, next)
	cs, done = stream(helloWith(&agentv1.AgentKeyRotation{PublicKey: r.Next, Endorsement: r.Endorsement, Proof: r.Proof}))
	if w := cs.next(t).GetWelcome(); w == nil || w.NextKeyId != agentproto.KeyID(r.Next) {
		t.Fatalf("welcome after the rotation: %v", w)
	}
	end(cs, done)
	a, err := e.st.GetAgent(ctx, e.agent)
	if err != nil || !r.Next.Equal(ed25519.PublicKey(a.NextPublicKey)) || !r.Current.Equal(ed25519.PublicKey(a.PublicKey)) {
		t.Fatalf("after the announcement: %+v, %v", a, err)
	}
	// The old key is still served (the agent may not have switched yet).
	cs, done = stream(helloWith(nil))
	if w := cs.next(t).GetWelcome(); w == nil {
		t.Fatal("the old key is refused before the agent switched")
	}
	end(cs, done)
	// The first hello under the next key makes it the agent's key; the
	// rotation after it, announced in the same hello, is recorded too.
	e.key = next
	_, third, _ := ed25519.GenerateKey(nil)
	r2 := agentproto.RotateAgentKey(e.agent, next, third)
	cs, done = stream(helloWith(&agentv1.AgentKeyRotation{PublicKey: r2.Next, Endorsement: r2.Endorsement, Proof: r2.Proof}))
	if w := cs.next(t).GetWelcome(); w == nil || w.NextKeyId != agentproto.KeyID(r2.Next) {
		t.Fatalf("welcome of the first hello under the next key, announcing another: %v", w)
	}
	end(cs, done)
	a, err = e.st.GetAgent(ctx, e.agent)
	if err != nil || !r.Next.Equal(ed25519.PublicKey(a.PublicKey)) || !r2.Next.Equal(ed25519.PublicKey(a.NextPublicKey)) || a.KeyRotatedAt.IsZero() {
		t.Fatalf("after the switch: %+v, %v", a, err)
	}
	// The old key is refused from then on.
	e.key = old
	cs = newChanStream()
	done = make(chan error, 1)
	go func() { done <- e.svc.Serve(ctx, cs) }()
	ch := cs.next(t).GetChallenge()
	b := helloWith(nil)(ch)
	bs, _ := protoMarshal(b)
	msg, _, err := agentchannelOpen(old, e.agent, ch, bs)
	if err != nil {
		t.Fatal(err)
	}
	cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_ChannelHello{ChannelHello: &agentv1.ChannelHello{AgentId: e.agent, Noise: msg}}}
	if err := <-done; connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("a hello under the old key after the rotation: %v, want unauthenticated", err)
	}
}

func protoMarshal(m *agentv1.Hello) ([]byte, error) { return proto.Marshal(m) }

func agentchannelOpen(k ed25519.PrivateKey, agentID string, ch *agentv1.Challenge, hello []byte) ([]byte, *agentchannel.AgentHandshake, error) {
	return agentchannel.OpenChannel(k, agentID, ch.PublicKey, ch.Nonce, hello)
}

// RevokeSelf: only the agent's own signature revokes it (the customer's
// agentd identity revoke); the revocation names the customer; a second
// call changes nothing; the agent's hellos are refused from then on.
func TestRevokeSelf(t *testing.T) {
	e := newStreamEnv(t)
	ctx := context.Background()
	// Signed a day ago, while imsd could not be reached (agentd identity
	// revoke keeps the call and sends it again): accepted. One signed in
	// the future is not.
	at := e.clk.Now().Add(10 * time.Minute)
	req := func(k ed25519.PrivateKey) *connect.Request[agentv1.RevokeSelfRequest] {
		return connect.NewRequest(&agentv1.RevokeSelfRequest{AgentId: e.agent, Time: timestamppb.New(at), By: "alice", Reason: "contract ended",
			Signature: agentproto.SignRevokeSelf(k, e.agent, "alice", "contract ended", at)})
	}
	_, evil, _ := ed25519.GenerateKey(nil)
	if _, err := e.svc.RevokeSelf(ctx, req(evil)); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("a revocation signed by another key: %v", err)
	}
	forged := req(e.key)
	forged.Msg.Reason = "changed on the way"
	if _, err := e.svc.RevokeSelf(ctx, forged); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("a revocation changed after signing: %v", err)
	}
	if _, err := e.svc.RevokeSelf(ctx, req(e.key)); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("a revocation signed 10 minutes ahead of imsd's clock: %v", err)
	}
	if a, _ := e.st.GetAgent(ctx, e.agent); !a.RevokedAt.IsZero() {
		t.Fatal("revoked by a bad call")
	}
	at = e.clk.Now().Add(-24 * time.Hour)
	for range 2 {
		if _, err := e.svc.RevokeSelf(ctx, req(e.key)); err != nil {
			t.Fatal(err)
		}
	}
	a, err := e.st.GetAgent(ctx, e.agent)
	if err != nil || a.RevokedAt.IsZero() || a.RevokedReason != "revoked by the customer: contract ended" {
		t.Fatalf("after RevokeSelf: %+v, %v", a, err)
	}
	cs := newChanStream()
	done := make(chan error, 1)
	go func() { done <- e.svc.Serve(ctx, cs) }()
	ch := cs.next(t).GetChallenge()
	b, _ := proto.Marshal(&agentv1.Hello{AgentId: e.agent, Signature: agentproto.SignChallenge(e.key, e.agent, ch.Nonce), Capacity: 1})
	msg, _, err := agentchannel.OpenChannel(e.key, e.agent, ch.PublicKey, ch.Nonce, b)
	if err != nil {
		t.Fatal(err)
	}
	cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_ChannelHello{ChannelHello: &agentv1.ChannelHello{AgentId: e.agent, Noise: msg}}}
	if err := <-done; connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("a hello of the revoked agent: %v", err)
	}
}
