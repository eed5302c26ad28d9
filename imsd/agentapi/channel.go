package agentapi

// The encrypted channel on imsd's side: the stream every message after
// the hello's handshake goes through, sealed (rpc/agentchannel;
// docs/design/agent-channel.md).

import (
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/rpc/agentchannel"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// sealedStream carries every message after the handshake as one sealed
// message of the channel. Its sends are serialised by conn.mu (Stream's
// contract), so messages are sealed in the order they leave; anything
// that does not open (in the clear, altered, replayed, reordered) ends
// the stream.
type sealedStream struct {
	Stream
	ch *agentchannel.Channel
}

func (s *sealedStream) Send(m *agentv1.ConnectResponse) error {
	out, err := agentchannel.SealResponse(s.ch, m)
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	return s.Stream.Send(out)
}

func (s *sealedStream) Receive(limit time.Duration) (*agentv1.ConnectRequest, error) {
	m, err := s.Stream.Receive(limit)
	if err != nil {
		return nil, err
	}
	in, err := agentchannel.OpenRequest(s.ch, m)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	return in, nil
}

// authenticated passes the hello's authentication on to the stream below.
func (s *sealedStream) authenticated() {
	if a, ok := s.Stream.(interface{ authenticated() }); ok {
		a.authenticated()
	}
}
