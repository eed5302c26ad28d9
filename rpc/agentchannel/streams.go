package agentchannel

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// The stream on each side once the channel is open: every message is one
// ConnectRequest or ConnectResponse, marshalled and sealed into the
// sealed field of an outer one. Anything else after the handshake ends
// the stream.

// ErrUnsealed is a message in the clear after the handshake: not from the
// other end (a proxy forging one), refused.
var ErrUnsealed = fmt.Errorf("%w: a message in the clear after the handshake (every message must be sealed)", ErrChannel)

// plainBufs holds the buffers a message's plaintext passes through
// between its encoding and its sealing (or its opening and its decoding):
// one allocation less per message on each side. A buffer is cleared
// before it goes back (a job's config passes through them); one grown
// past maxPooledPlain is left to the collector.
var plainBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

const maxPooledPlain = 64 << 10

func getPlain() *[]byte { return plainBufs.Get().(*[]byte) }

func putPlain(bp *[]byte, b []byte) {
	if cap(b) > maxPooledPlain {
		return
	}
	clear(b)
	*bp = b[:0]
	plainBufs.Put(bp)
}

// seal marshals m and seals it.
func seal(c *Channel, m proto.Message) ([]byte, error) {
	bp := getPlain()
	b, err := proto.MarshalOptions{}.MarshalAppend(*bp, m)
	if err != nil {
		putPlain(bp, b)
		return nil, err
	}
	s, err := c.Seal(b)
	putPlain(bp, b)
	return s, err
}

// open opens sealed (ErrUnsealed when there is none) into into.
func open(c *Channel, sealed []byte, into proto.Message) error {
	if sealed == nil {
		return ErrUnsealed
	}
	bp := getPlain()
	b, err := c.openAppend(*bp, sealed)
	if err != nil {
		putPlain(bp, b)
		return err
	}
	// Unmarshal copies what it keeps (bytes and strings): the buffer
	// can be reused.
	err = proto.Unmarshal(b, into)
	putPlain(bp, b)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrChannel, err)
	}
	return nil
}

// SealRequest seals m for imsd.
func SealRequest(c *Channel, m *agentv1.ConnectRequest) (*agentv1.ConnectRequest, error) {
	s, err := seal(c, m)
	if err != nil {
		return nil, err
	}
	return &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Sealed{Sealed: s}}, nil
}

// OpenRequest opens a message from the agent: a heartbeat, ack, logs,
// result, telemetry batch or support shell event.
func OpenRequest(c *Channel, m *agentv1.ConnectRequest) (*agentv1.ConnectRequest, error) {
	var in agentv1.ConnectRequest
	if err := open(c, m.GetSealed(), &in); err != nil {
		return nil, err
	}
	switch in.Msg.(type) {
	case *agentv1.ConnectRequest_Heartbeat, *agentv1.ConnectRequest_Ack, *agentv1.ConnectRequest_Logs, *agentv1.ConnectRequest_Result,
		*agentv1.ConnectRequest_Telemetry,
		*agentv1.ConnectRequest_Shell:
		return &in, nil
	}
	return nil, fmt.Errorf("%w: a sealed message that is not a heartbeat, ack, logs, result, telemetry or shell event", ErrChannel)
}

// SealResponse seals m for the agent.
func SealResponse(c *Channel, m *agentv1.ConnectResponse) (*agentv1.ConnectResponse, error) {
	s, err := seal(c, m)
	if err != nil {
		return nil, err
	}
	return &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Sealed{Sealed: s}}, nil
}

// OpenResponse opens a message from imsd: anything but a handshake
// message.
func OpenResponse(c *Channel, m *agentv1.ConnectResponse) (*agentv1.ConnectResponse, error) {
	var out agentv1.ConnectResponse
	if err := open(c, m.GetSealed(), &out); err != nil {
		return nil, err
	}
	switch out.Msg.(type) {
	case nil, *agentv1.ConnectResponse_Sealed, *agentv1.ConnectResponse_ChannelAccept, *agentv1.ConnectResponse_Challenge:
		return nil, fmt.Errorf("%w: a sealed message that is a handshake message or empty", ErrChannel)
	}
	return &out, nil
}

// ClientStream is the agent's end of a stream (connect-go's
// BidiStreamForClient).
type ClientStream interface {
	Send(*agentv1.ConnectRequest) error
	Receive() (*agentv1.ConnectResponse, error)
}

// AgentStream is the agent's end once the channel is open. Send is for
// one goroutine at a time, Receive for one (another) goroutine.
type AgentStream struct {
	st  ClientStream
	ch  *Channel
	tap Tap
}

// Tap sees every message the agent sends on the channel, the hello
// included, with its marshalled form (what is sealed), before it is
// sent: the one place all of them pass (the agent's egress ledger,
// agentd/ledger). It must not keep plain or change m.
type Tap func(m *agentv1.ConnectRequest, plain []byte)

func (s *AgentStream) Send(m *agentv1.ConnectRequest) error {
	bp := getPlain()
	b, err := proto.MarshalOptions{}.MarshalAppend(*bp, m)
	if err != nil {
		putPlain(bp, b)
		return err
	}
	if s.tap != nil {
		s.tap(m, b)
	}
	sealed, err := s.ch.Seal(b)
	putPlain(bp, b)
	if err != nil {
		return err
	}
	return s.st.Send(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Sealed{Sealed: sealed}})
}

func (s *AgentStream) Receive() (*agentv1.ConnectResponse, error) {
	m, err := s.st.Receive()
	if err != nil {
		return nil, err
	}
	return OpenResponse(s.ch, m)
}

// Dial runs the agent's side of the handshake on st, whose challenge ch
// the caller read: trust decides whether imsd's key (the challenge's) is
// one the agent trusts (nil trusts any: test agents only); hello travels
// as the handshake's payload, readable only by the holder of that key.
func Dial(st ClientStream, ch *agentv1.Challenge, agentKey ed25519.PrivateKey, agentID string, trust func(ed25519.PublicKey) error, hello *agentv1.Hello) (*AgentStream, error) {
	return DialTap(st, ch, agentKey, agentID, trust, hello, nil)
}

// DialTap is Dial with a Tap (nil: none) that sees the hello and every
// message sent after it.
func DialTap(st ClientStream, ch *agentv1.Challenge, agentKey ed25519.PrivateKey, agentID string, trust func(ed25519.PublicKey) error, hello *agentv1.Hello, tap Tap) (*AgentStream, error) {
	imsdKey := ed25519.PublicKey(ch.GetPublicKey())
	if trust != nil {
		if err := trust(imsdKey); err != nil {
			return nil, err
		}
	}
	b, err := proto.Marshal(hello)
	if err != nil {
		return nil, err
	}
	if tap != nil {
		tap(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Hello{Hello: hello}}, b)
	}
	msg, hs, err := OpenChannel(agentKey, agentID, imsdKey, ch.GetNonce(), b)
	if err != nil {
		return nil, err
	}
	if err := st.Send(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_ChannelHello{ChannelHello: &agentv1.ChannelHello{
		AgentId: agentID, Noise: msg}}}); err != nil {
		return nil, fmt.Errorf("send hello: %w", err)
	}
	m, err := st.Receive()
	if err != nil {
		return nil, fmt.Errorf("read imsd's answer to the channel hello: %w", err)
	}
	accept := m.GetChannelAccept()
	if accept == nil {
		return nil, errors.New("protocol: imsd did not answer the channel hello")
	}
	c, err := hs.Finish(accept)
	if err != nil {
		return nil, err
	}
	return &AgentStream{st: st, ch: c, tap: tap}, nil
}

// ServerStream is imsd's end of a stream as a test imsd holds it
// (connect-go's BidiStream).
type ServerStream interface {
	Send(*agentv1.ConnectResponse) error
	Receive() (*agentv1.ConnectRequest, error)
}

// IMSDStream is a test imsd's end once the channel is open (imsd's own
// is agentapi's, over its Stream).
type IMSDStream struct {
	st ServerStream
	ch *Channel
}

func (s *IMSDStream) Send(m *agentv1.ConnectResponse) error {
	out, err := SealResponse(s.ch, m)
	if err != nil {
		return err
	}
	return s.st.Send(out)
}

func (s *IMSDStream) Receive() (*agentv1.ConnectRequest, error) {
	m, err := s.st.Receive()
	if err != nil {
		return nil, err
	}
	return OpenRequest(s.ch, m)
}

// Serve runs imsd's side for a test imsd: it sends the challenge (nonce,
// imsdKey's public key), reads the agent's channel hello, checks it
// against agentKey (the agent's registered key, by agent id) and returns
// the open stream and the agent's hello.
func Serve(st ServerStream, imsdKey ed25519.PrivateKey, nonce []byte, agentKey func(agentID string) ed25519.PublicKey) (*IMSDStream, *agentv1.Hello, error) {
	if err := st.Send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Challenge{Challenge: &agentv1.Challenge{
		Nonce: nonce, PublicKey: imsdKey.Public().(ed25519.PublicKey)}}}); err != nil {
		return nil, nil, err
	}
	m, err := st.Receive()
	if err != nil {
		return nil, nil, err
	}
	ch := m.GetChannelHello()
	if ch == nil {
		return nil, nil, errors.New("the first message is not a channel hello")
	}
	raw, accept, c, err := AcceptChannel(imsdKey, ch.AgentId, agentKey(ch.AgentId), nonce, ch.Noise)
	if err != nil {
		return nil, nil, err
	}
	var hello agentv1.Hello
	if err := proto.Unmarshal(raw, &hello); err != nil {
		return nil, nil, err
	}
	if err := st.Send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_ChannelAccept{ChannelAccept: accept}}); err != nil {
		return nil, nil, err
	}
	return &IMSDStream{st: st, ch: c}, &hello, nil
}
