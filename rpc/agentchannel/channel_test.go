package agentchannel

import (
	"bytes"
	"crypto/ecdh"
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
)

type channelPair struct {
	agent, imsd *Channel
	hello       []byte
}

func handshake(t *testing.T, agentKey ed25519.PrivateKey, imsdKey ed25519.PrivateKey, registered ed25519.PublicKey, nonce []byte) (*channelPair, error) {
	t.Helper()
	msg, h, err := OpenChannel(agentKey, "agt_1", imsdKey.Public().(ed25519.PublicKey), nonce, []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	hello, accept, ic, err := AcceptChannel(imsdKey, "agt_1", registered, nonce, msg)
	if err != nil {
		return nil, err
	}
	ac, err := h.Finish(accept)
	if err != nil {
		return nil, err
	}
	return &channelPair{agent: ac, imsd: ic, hello: hello}, nil
}

// The X25519 form of an Ed25519 key pair is a key pair: the public key
// converted is the private key's public key (checked with crypto/ecdh).
func TestX25519FormOfEd25519Keys(t *testing.T) {
	for range 20 {
		_, k, _ := ed25519.GenerateKey(nil)
		dh, err := x25519Key(k)
		if err != nil {
			t.Fatal(err)
		}
		priv, err := ecdh.X25519().NewPrivateKey(dh.Private)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(priv.PublicKey().Bytes(), dh.Public) {
			t.Fatalf("converted public key %x, private key's %x", dh.Public, priv.PublicKey().Bytes())
		}
	}
}

func TestChannelRoundTrip(t *testing.T) {
	_, ak, _ := ed25519.GenerateKey(nil)
	_, ik, _ := ed25519.GenerateKey(nil)
	p, err := handshake(t, ak, ik, ak.Public().(ed25519.PublicKey), []byte("nonce-1"))
	if err != nil {
		t.Fatal(err)
	}
	if string(p.hello) != "hello" {
		t.Fatalf("hello %q", p.hello)
	}
	// Sizes around the Noise message limit, and empty.
	for _, n := range []int{0, 1, 100, maxNoise - tagLen, maxNoise - tagLen + 1, 3*maxNoise + 7} {
		plain := bytes.Repeat([]byte{byte(n)}, n)
		for _, dir := range []struct{ from, to *Channel }{{p.agent, p.imsd}, {p.imsd, p.agent}} {
			s, err := dir.from.Seal(plain)
			if err != nil {
				t.Fatal(err)
			}
			if len(s) != sealedLen(n) {
				t.Fatalf("sealed %d bytes to %d, want %d", n, len(s), sealedLen(n))
			}
			if bytes.Contains(s, []byte("hello")) && n > 0 {
				t.Fatal("plaintext visible")
			}
			got, err := dir.to.Open(s)
			if err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("%d bytes: open: %v", n, err)
			}
		}
	}
}

// What a path attacker can do to sealed messages fails to open: alter,
// replay, reorder, drop one, or move one to another stream of the same
// agent; and the handshake refuses another key or another stream.
func TestChannelRefusesTampering(t *testing.T) {
	_, ak, _ := ed25519.GenerateKey(nil)
	_, ik, _ := ed25519.GenerateKey(nil)
	reg := ak.Public().(ed25519.PublicKey)
	fresh := func() *channelPair {
		p, err := handshake(t, ak, ik, reg, []byte("nonce"))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	seal := func(c *Channel, s string) []byte {
		b, err := c.Seal([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	wantRefused := func(name string, c *Channel, b []byte) {
		t.Helper()
		if _, err := c.Open(b); !errors.Is(err, ErrChannel) {
			t.Errorf("%s: opened (%v)", name, err)
		}
	}
	p := fresh()
	m := seal(p.imsd, "renewed")
	m[len(m)-1] ^= 1
	wantRefused("altered", p.agent, m)

	p = fresh()
	_, m2 := seal(p.imsd, "one"), seal(p.imsd, "two")
	wantRefused("reordered", p.agent, m2)
	p = fresh()
	m1 := seal(p.imsd, "one")
	if _, err := p.agent.Open(m1); err != nil {
		t.Fatal(err)
	}
	wantRefused("replayed", p.agent, m1)
	p = fresh()
	seal(p.imsd, "dropped")
	wantRefused("after a drop", p.agent, seal(p.imsd, "next"))
	// Another stream of the same agent (same keys, a new handshake).
	p, q := fresh(), fresh()
	wantRefused("from another stream", q.agent, seal(p.imsd, "welcome"))
	// Forged: bytes sealed by no one.
	wantRefused("made up", fresh().agent, bytes.Repeat([]byte{7}, 40))

	// The handshake: an agent whose key is not the registered one.
	_, other, _ := ed25519.GenerateKey(nil)
	if _, err := handshake(t, other, ik, reg, []byte("nonce")); err == nil || !strings.Contains(err.Error(), "registered") {
		t.Errorf("another agent key: %v", err)
	}
	// imsd's side without imsd's key (a proxy answering as imsd).
	msg, h, _ := OpenChannel(ak, "agt_1", ik.Public().(ed25519.PublicKey), []byte("nonce"), []byte("hello"))
	if _, _, _, err := AcceptChannel(other, "agt_1", reg, []byte("nonce"), msg); err == nil {
		t.Error("a handshake opened without imsd's private key")
	}
	// A first message replayed on another stream (another nonce).
	if _, _, _, err := AcceptChannel(ik, "agt_1", reg, []byte("nonce-2"), msg); err == nil {
		t.Error("a handshake message was accepted on another stream")
	}
	// An answer from an earlier stream (a replayed welcome).
	_, oldAccept, _, err := AcceptChannel(ik, "agt_1", reg, []byte("nonce"), msg)
	if err != nil {
		t.Fatal(err)
	}
	msg2, h2, _ := OpenChannel(ak, "agt_1", ik.Public().(ed25519.PublicKey), []byte("nonce"), []byte("hello"))
	_ = msg2
	if _, err := h2.Finish(oldAccept); err == nil {
		t.Error("imsd's answer from another handshake was accepted")
	}
	_ = h
}
