package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/internal/attest/keylesstest"
)

// TestPolicySupplyChainIdentities: --identity and --trusted-root land in
// the signed policy (the root's contents, not its path); an identity
// without a root, a malformed identity, a root file that is not a
// trusted root are refused naming the flag; --no-identities clears both.
func TestPolicySupplyChainIdentities(t *testing.T) {
	state := t.TempDir()
	imsdPub, _, _ := ed25519.GenerateKey(rand.Reader)
	agentKey, _ := identity.NewKey()
	if err := identity.Save(state, identity.Identity{AgentID: "agt_test", PrivateKey: agentKey, IMSDKeys: []ed25519.PublicKey{imsdPub}}); err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC) }
	cmd := func(args ...string) (int, string) {
		var out bytes.Buffer
		code := policyCmd(append([]string{"--state-dir", state}, args...), &out, &out, now)
		return code, out.String()
	}
	e := keylesstest.New(t, 0)
	rj, err := e.Root(t, e.FulcioCA).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rootFile, badFile := filepath.Join(dir, "trusted_root.json"), filepath.Join(dir, "bad.json")
	os.WriteFile(rootFile, rj, 0o644)
	os.WriteFile(badFile, []byte(`{"mediaType":"nope"}`), 0o644)
	const id = `issuer=https://oidc.build.example,subject=https://kubernetes\.io/namespaces/byoc/serviceaccounts/build-agent`

	if code, out := cmd("supply-chain", "--identity", id); code != 2 || !strings.Contains(out, "--identity: keyless identities need a trusted root (--trusted-root FILE)") {
		t.Fatalf("identity without root: %d %s", code, out)
	}
	if code, out := cmd("supply-chain", "--identity", "subject=x", "--trusted-root", rootFile); code != 2 || !strings.Contains(out, "want issuer=URL,subject=REGEX") {
		t.Fatalf("bad identity: %d %s", code, out)
	}
	if code, out := cmd("supply-chain", "--identity", id, "--trusted-root", badFile); code != 2 || !strings.Contains(out, "--trusted-root: trusted root "+badFile) {
		t.Fatalf("bad root: %d %s", code, out)
	}
	if code, out := cmd("supply-chain", "--require-attestation", "slsa-provenance", "--identity", id, "--trusted-root", rootFile); code != 0 ||
		!strings.Contains(out, "1 keyless identit") || !strings.Contains(out, "trusted: keyless identity "+id) {
		t.Fatalf("set: %d %s", code, out)
	}
	st, err := permissions.Load(state)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.SupplyChain.Identities) != 1 || len(st.SupplyChain.TrustedRoot) == 0 {
		t.Fatalf("stored: %+v", st.SupplyChain)
	}
	if ids, tr, err := st.SupplyChain.KeylessTrust(); err != nil || len(ids) != 1 || tr == nil {
		t.Fatalf("stored trust: %v %v %v", ids, tr, err)
	}
	if code, out := cmd("supply-chain", "--no-identities"); code != 0 || strings.Contains(out, "keyless") {
		t.Fatalf("clear: %d %s", code, out)
	}
	if st, _ := permissions.Load(state); len(st.SupplyChain.Identities) != 0 || len(st.SupplyChain.TrustedRoot) != 0 {
		t.Fatalf("cleared: %+v", st.SupplyChain)
	}
}
