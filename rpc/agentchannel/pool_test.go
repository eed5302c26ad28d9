package agentchannel

import (
	"crypto/ed25519"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// Messages sealed and opened through the pooled plaintext buffers come out
// whole whatever came before them: sizes up and down, past the pool's
// limit and across Noise chunks, a failed open between them.
func TestSealOpenWithPooledBuffers(t *testing.T) {
	_, ak, _ := ed25519.GenerateKey(nil)
	_, ik, _ := ed25519.GenerateKey(nil)
	p, err := handshake(t, ak, ik, ak.Public().(ed25519.PublicKey), []byte("nonce-1"))
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{10, 3000, 1, maxPooledPlain + 100, 200, 3*maxNoise + 7, 0, 50} {
		want := &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Cancel{Cancel: &agentv1.JobCancel{JobId: "job_1", Reason: strings.Repeat(string(rune('a'+i)), n)}}}
		s, err := SealResponse(p.imsd, want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := OpenResponse(p.agent, s)
		if err != nil || !proto.Equal(got, want) {
			t.Fatalf("%d bytes: got %v, %v", n, got, err)
		}
		up := &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Ack{Ack: &agentv1.JobAck{WriteId: uint64(i), JobId: strings.Repeat("j", n)}}}
		as := &AgentStream{ch: p.agent, st: &captureStream{}}
		if err := as.Send(up); err != nil {
			t.Fatal(err)
		}
		back, err := OpenRequest(p.imsd, as.st.(*captureStream).last)
		if err != nil || !proto.Equal(back, up) {
			t.Fatalf("%d bytes up: got %v, %v", n, back, err)
		}
	}
	// A message that does not open leaves the next one whole.
	s, _ := SealResponse(p.imsd, &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Cancel{Cancel: &agentv1.JobCancel{JobId: "x"}}})
	bad := &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Sealed{Sealed: append([]byte(nil), s.GetSealed()...)}}
	bad.GetSealed()[0] ^= 1
	if _, err := OpenResponse(p.agent, bad); err == nil {
		t.Fatal("an altered message opened")
	}
}

type captureStream struct{ last *agentv1.ConnectRequest }

func (c *captureStream) Send(m *agentv1.ConnectRequest) error       { c.last = m; return nil }
func (c *captureStream) Receive() (*agentv1.ConnectResponse, error) { return nil, nil }
