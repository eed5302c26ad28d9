// Package agentchannel is the encrypted, authenticated channel between
// an agent and imsd: a Noise handshake at the hello bound to the Ed25519
// keys both sides pinned at enrolment, then every message sealed. It
// holds the construction (this file) and the stream on each side of it
// (streams.go), used by agentd, imsd and the test agents and imsds.
package agentchannel

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha512"
	"encoding/binary"
	"errors"
	"fmt"

	"filippo.io/edwards25519"
	"github.com/flynn/noise"

	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// The construction. At the start of every stream the agent and imsd run
// the Noise handshake Noise_IK_25519_ChaChaPoly_SHA256 (the Noise
// Protocol Framework, revision 34, through github.com/flynn/noise): the
// agent is the initiator and already knows imsd's static key; imsd learns
// the agent's from the first message and checks it is the one the agent
// registered at enrolment. The static keys are the Ed25519 keys both
// sides pinned at enrolment, in their X25519 form (RFC 7748's birational
// map for the public key, the clamped first half of SHA-512 of the seed
// for the private key, as libsodium's crypto_sign_ed25519_*_to_curve25519
// do). The prologue binds the handshake to imsd's challenge nonce for this
// stream, the agent's id and imsd's key id, so a handshake message is
// good on one stream only. After it every message in both directions is
// one ChaCha20-Poly1305 message of the transport phase (split in Noise
// messages of at most 65535 bytes), whose implicit nonce is its sequence
// number: a message dropped, replayed, reordered, altered or moved to
// another stream fails to open, and the stream ends. See
// docs/design/agent-channel.md.

// channelContext starts the handshake's prologue.
const channelContext = "byoc agent channel v1\x00"

var channelSuite = noise.NewCipherSuite(noise.DH25519, noise.CipherChaChaPoly, noise.HashSHA256)

// ChannelProtocol names the construction, for logs and docs.
const ChannelProtocol = "Noise_IK_25519_ChaChaPoly_SHA256"

// maxNoise is the largest Noise message (the spec's limit); a sealed
// message is a run of them.
const maxNoise = noise.MaxMsgLen

// tagLen is ChaCha20-Poly1305's tag.
const tagLen = 16

// X25519Public is the X25519 form (Montgomery u-coordinate) of an Ed25519
// public key.
func X25519Public(pub ed25519.PublicKey) ([]byte, error) {
	if len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("ed25519 public key: %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	p, err := new(edwards25519.Point).SetBytes(pub)
	if err != nil {
		return nil, fmt.Errorf("ed25519 public key: %w", err)
	}
	return p.BytesMontgomery(), nil
}

// x25519Key is the X25519 key pair of an Ed25519 private key.
func x25519Key(k ed25519.PrivateKey) (noise.DHKey, error) {
	h := sha512.Sum512(k.Seed())
	priv := h[:32]
	priv[0] &= 248
	priv[31] &= 127
	priv[31] |= 64
	pub, err := X25519Public(k.Public().(ed25519.PublicKey))
	if err != nil {
		return noise.DHKey{}, err
	}
	return noise.DHKey{Private: priv, Public: pub}, nil
}

func channelPrologue(nonce []byte, agentID, keyID string) []byte {
	b := []byte(channelContext)
	for _, s := range []string{string(nonce), agentID, keyID} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	return b
}

// Channel is one stream's transport keys: what one side sends and what
// it receives. Seal and Open are each for one goroutine at a time (the
// caller sends in the order it seals).
type Channel struct {
	send, recv *noise.CipherState
}

// Seal encrypts one message.
func (c *Channel) Seal(plain []byte) ([]byte, error) {
	n := (len(plain) + maxNoise - tagLen - 1) / (maxNoise - tagLen)
	out := make([]byte, 0, len(plain)+max(n, 1)*tagLen)
	for first := true; first || len(plain) > 0; first = false {
		k := min(len(plain), maxNoise-tagLen)
		var err error
		if out, err = c.send.Encrypt(out, nil, plain[:k]); err != nil {
			return nil, err
		}
		plain = plain[k:]
	}
	return out, nil
}

// ErrChannel is what every refusal of the channel wraps: a message or a
// handshake answer that is not the other end's (tampered with on the
// path). The stream ends.
var ErrChannel = errors.New("agent channel")

// errNotOpen is a sealed message that does not open.
var errNotOpen = fmt.Errorf("%w: a sealed message does not open with this stream's keys (altered, replayed, reordered, one before it dropped, or from another stream)", ErrChannel)

// Open decrypts one message Seal made on the other side.
func (c *Channel) Open(sealed []byte) ([]byte, error) {
	out, err := c.openAppend(make([]byte, 0, len(sealed)), sealed)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// openAppend is Open appending the plaintext to out. On an error it still
// returns out with what it holds (the chunks that opened before), for
// the caller to clear.
func (c *Channel) openAppend(out, sealed []byte) ([]byte, error) {
	if len(sealed) < tagLen {
		return out, errNotOpen
	}
	for first := true; first || len(sealed) > 0; first = false {
		k := min(len(sealed), maxNoise)
		next, err := c.recv.Decrypt(out, nil, sealed[:k])
		if err != nil {
			return out, errNotOpen
		}
		out = next
		sealed = sealed[k:]
	}
	return out, nil
}

// AgentHandshake is the agent's side of a handshake in progress.
type AgentHandshake struct {
	hs *noise.HandshakeState
}

// OpenChannel starts the agent's side: it returns the first handshake
// message, carrying hello (the agent's marshalled Hello), for imsd's key
// imsdKey on the stream whose challenge was nonce.
func OpenChannel(agentKey ed25519.PrivateKey, agentID string, imsdKey ed25519.PublicKey, nonce, hello []byte) ([]byte, *AgentHandshake, error) {
	static, err := x25519Key(agentKey)
	if err != nil {
		return nil, nil, err
	}
	peer, err := X25519Public(imsdKey)
	if err != nil {
		return nil, nil, fmt.Errorf("imsd's key: %w", err)
	}
	hs, err := noise.NewHandshakeState(noise.Config{
		CipherSuite: channelSuite, Random: rand.Reader, Pattern: noise.HandshakeIK, Initiator: true,
		Prologue: channelPrologue(nonce, agentID, agentproto.KeyID(imsdKey)), StaticKeypair: static, PeerStatic: peer,
	})
	if err != nil {
		return nil, nil, err
	}
	msg, _, _, err := hs.WriteMessage(nil, hello)
	if err != nil {
		return nil, nil, fmt.Errorf("channel handshake: %w", err)
	}
	return msg, &AgentHandshake{hs: hs}, nil
}

// Finish reads imsd's answer and returns the agent's channel.
func (h *AgentHandshake) Finish(accept []byte) (*Channel, error) {
	payload, toIMSD, toAgent, err := h.hs.ReadMessage(nil, accept)
	if err != nil || toIMSD == nil {
		return nil, fmt.Errorf("%w: imsd's answer to the handshake does not verify (not from the holder of imsd's key, or not for this stream)", ErrChannel)
	}
	if len(payload) != 0 {
		return nil, fmt.Errorf("%w: imsd's answer to the handshake carries a payload", ErrChannel)
	}
	return &Channel{send: toIMSD, recv: toAgent}, nil
}

// AcceptChannel runs imsd's side on the first handshake message of the
// stream whose challenge was nonce, from the agent agentID whose
// registered key is agentKey. It returns the agent's hello (the
// handshake's payload), imsd's answer to send, and imsd's channel.
func AcceptChannel(imsdKey ed25519.PrivateKey, agentID string, agentKey ed25519.PublicKey, nonce, msg []byte) (hello, accept []byte, ch *Channel, err error) {
	hello, accept, ch, _, err = AcceptChannelKeys(imsdKey, agentID, []ed25519.PublicKey{agentKey}, nonce, msg)
	return hello, accept, ch, err
}

// AcceptChannelKeys is AcceptChannel for an agent that may hold either
// of agentKeys (its key and, while a rotation of it is under way, its
// next key); matched is the index of the key the agent used.
func AcceptChannelKeys(imsdKey ed25519.PrivateKey, agentID string, agentKeys []ed25519.PublicKey, nonce, msg []byte) (hello, accept []byte, ch *Channel, matched int, err error) {
	static, err := x25519Key(imsdKey)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	hs, err := noise.NewHandshakeState(noise.Config{
		CipherSuite: channelSuite, Random: rand.Reader, Pattern: noise.HandshakeIK, Initiator: false,
		Prologue: channelPrologue(nonce, agentID, agentproto.KeyID(imsdKey.Public().(ed25519.PublicKey))), StaticKeypair: static,
	})
	if err != nil {
		return nil, nil, nil, 0, err
	}
	hello, _, _, err = hs.ReadMessage(nil, msg)
	if err != nil {
		return nil, nil, nil, 0, fmt.Errorf("%w: the agent's handshake message does not verify (not for this stream or imsd's key)", ErrChannel)
	}
	matched = -1
	for i, k := range agentKeys {
		want, err := X25519Public(k)
		if err != nil {
			return nil, nil, nil, 0, fmt.Errorf("the agent's registered key: %w", err)
		}
		if bytes.Equal(hs.PeerStatic(), want) {
			matched = i
			break
		}
	}
	if matched < 0 {
		return nil, nil, nil, 0, fmt.Errorf("%w: the agent's key is not the one agent %s registered at enrolment", ErrChannel, agentID)
	}
	accept, toIMSD, toAgent, err := hs.WriteMessage(nil, nil)
	if err != nil || toIMSD == nil {
		return nil, nil, nil, 0, fmt.Errorf("channel handshake: %v", err)
	}
	return hello, accept, &Channel{send: toAgent, recv: toIMSD}, matched, nil
}

// sealedLen is what Seal makes of n bytes (tests).
func sealedLen(n int) int {
	chunks := max((n+maxNoise-tagLen-1)/(maxNoise-tagLen), 1)
	return n + chunks*tagLen
}
