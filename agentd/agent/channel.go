package agent

// The encrypted channel on the agent's side (rpc/agentchannel;
// docs/design/agent-channel.md).

import (
	"crypto/ed25519"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/rpc/agentchannel"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// errUntrustedIMSD refuses a server that does not hold a key the agent
// trusts: the agent opens no channel to it, so takes no job from it.
var errUntrustedIMSD = errors.New("refusing the server")

// errIdentityRefused is imsd's refusal of the agent's identity, signed by
// imsd for this stream: retrying cannot fix it.
var errIdentityRefused = errors.New("imsd refused this agent's identity")

// errUnsignedRefusal is an unauthenticated answer to the hello that imsd
// did not sign: a network error or a forgery on the path, not a reason to
// stop.
var errUnsignedRefusal = errors.New("an answer to the hello said unauthenticated without imsd's signature (forged on the path, or a bad signature imsd saw: ignored; connecting again)")

// helloRefusal sorts an error of the hello: an unauthenticated answer stops the
// agent only if imsd signed it for this stream and this agent
// (agentproto.VerifyHelloRefusal).
func (a *Agent) helloRefusal(err error, ch *agentv1.Challenge) error {
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeUnauthenticated {
		return err
	}
	if agentproto.VerifyHelloRefusal(ch.PublicKey, ch.Nonce, a.id.AgentID, ce.Meta().Get(agentproto.HelloRefusalHeader)) {
		return fmt.Errorf("%w: %w", errIdentityRefused, err)
	}
	return fmt.Errorf("%w: %w", errUnsignedRefusal, err)
}

// openChannel runs the agent's half of the handshake on st after imsd's
// challenge ch: imsd's key must be one the agent trusts (the key it
// enrolled with, or one endorsed by a trusted key through the
// challenge's key chain), and hello travels as the handshake's payload,
// readable only by the holder of that key. After it, Send (from the
// session's goroutine) and Receive (from its reader) seal and open every
// message, and anything in the clear ends the stream.
func (a *Agent) openChannel(st *clientStream, ch *agentv1.Challenge, hello *agentv1.Hello) (*agentchannel.AgentStream, error) {
	a.learnKeys(ch.KeyChain, ch.RetiredKeys)
	hello.ImsdKeyIds = a.keyIDs()
	var tap agentchannel.Tap
	if a.cfg.Ledger != nil {
		tap = a.cfg.Ledger.Tap
	}
	return agentchannel.DialTap(st, ch, a.privateKey(), a.id.AgentID, func(imsdKey ed25519.PublicKey) error {
		if k, ok := a.keys[agentproto.KeyID(imsdKey)]; !ok || !k.Equal(imsdKey) {
			return fmt.Errorf("%w: the server at %s offered key %s, which this agent does not trust (neither the key it enrolled with nor one endorsed by it)",
				errUntrustedIMSD, a.cfg.IMSURL, agentproto.KeyID(imsdKey))
		}
		return nil
	}, hello, tap)
}
