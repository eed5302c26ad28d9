package agent

// The encrypted channel on the agent's side (rpc/agentchannel;
// docs/design/agent-channel.md).

import (
	"crypto/ed25519"
	"errors"
	"fmt"

	"github.com/byoc-dev/byoc/rpc/agentchannel"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// errUntrustedIMSD refuses a server that does not hold a key the agent
// trusts: the agent opens no channel to it, so takes no job from it.
var errUntrustedIMSD = errors.New("refusing the server")

// openChannel runs the agent's half of the handshake on st after imsd's
// challenge ch: imsd's key must be one the agent trusts (the key it
// enrolled with, or one endorsed by a trusted key through the
// challenge's key chain), and hello travels as the handshake's payload,
// readable only by the holder of that key. After it, Send (from the
// session's goroutine) and Receive (from its reader) seal and open every
// message, and anything in the clear ends the stream.
func (a *Agent) openChannel(st *clientStream, ch *agentv1.Challenge, hello *agentv1.Hello) (*agentchannel.AgentStream, error) {
	a.learnKeys(ch.KeyChain)
	return agentchannel.Dial(st, ch, a.id.PrivateKey, a.id.AgentID, func(imsdKey ed25519.PublicKey) error {
		if k, ok := a.keys[agentproto.KeyID(imsdKey)]; !ok || !k.Equal(imsdKey) {
			return fmt.Errorf("%w: the server at %s offered key %s, which this agent does not trust (neither the key it enrolled with nor one endorsed by it)",
				errUntrustedIMSD, a.cfg.IMSURL, agentproto.KeyID(imsdKey))
		}
		return nil
	}, hello)
}
