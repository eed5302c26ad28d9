package plugindist_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/internal/plugindist"
)

func agentRelease(v string) plugindist.AgentRelease {
	return plugindist.AgentRelease{Version: v, Binaries: map[string]map[string][]byte{
		"linux/amd64": {"agentd": []byte("agentd " + v), "byoc-plugins": []byte("plugins " + v)}}}
}

// An agent release reads back as pushed, verifies with its signing key
// only, and is never taken for a plugin release or the reverse.
func TestAgentRelease(t *testing.T) {
	ctx := t.Context()
	repo := layout(t)
	md, err := plugindist.PushAgent(ctx, repo, "1.5.0", agentRelease("1.5.0"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := plugindist.ReadAgent(ctx, repo, md.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if m.Type != plugindist.AgentType || m.Version != "1.5.0" || len(m.Layers) != 2 {
		t.Fatalf("read: %+v", m)
	}
	if b, err := plugindist.FetchBinary(ctx, repo, m, plugindist.AgentKey("linux/amd64", "byoc-plugins")); err != nil || string(b) != "plugins 1.5.0" {
		t.Fatalf("byoc-plugins: %q %v", b, err)
	}
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	if _, err := plugindist.Verify(ctx, repo, m, []ed25519.PublicKey{pub}); err == nil {
		t.Fatal("unsigned agent release verified")
	}
	if _, err := plugindist.Sign(ctx, repo, md, plugindist.AgentType, "1.5.0", key); err != nil {
		t.Fatal(err)
	}
	if _, err := plugindist.Verify(ctx, repo, m, []ed25519.PublicKey{pub}); err != nil {
		t.Fatal(err)
	}
	if _, err := plugindist.Verify(ctx, repo, m, []ed25519.PublicKey{other}); err == nil {
		t.Fatal("verified with another key")
	}
	if _, err := plugindist.Read(ctx, repo, md.Digest); err == nil || !strings.Contains(err.Error(), "is not a plugin release") {
		t.Fatalf("agent release read as a plugin release: %v", err)
	}
	pd, err := plugindist.Push(ctx, repo, "", release())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plugindist.ReadAgent(ctx, repo, pd.Digest); err == nil || !strings.Contains(err.Error(), "is not an agent release") {
		t.Fatalf("plugin release read as an agent release: %v", err)
	}
	bad := agentRelease("1.5")
	if err := bad.Check(); err == nil {
		t.Fatal("version 1.5 accepted")
	}
	bad = agentRelease("1.6.0")
	delete(bad.Binaries["linux/amd64"], "byoc-plugins")
	if err := bad.Check(); err == nil || !strings.Contains(err.Error(), "byoc-plugins binary is missing") {
		t.Fatalf("missing byoc-plugins: %v", err)
	}
}
