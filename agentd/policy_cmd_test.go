package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// TestPolicySupplyChain sets, shows and changes the customer's
// supply-chain policy; it lands in the signed permissions.json, and a
// bad mode or key file is refused naming the flag.
func TestPolicySupplyChain(t *testing.T) {
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
	if code, out := cmd("supply-chain"); code != 0 || !strings.Contains(out, "no signature required") ||
		!strings.Contains(out, "imsd key "+agentproto.KeyID(imsdPub)) {
		t.Fatalf("show: %d %s", code, out)
	}
	vendorPub, _, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(vendorPub)
	keyFile := filepath.Join(t.TempDir(), "vendor.pub")
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644)
	if code, out := cmd("supply-chain", "--require-signature", "--key", keyFile); code != 0 ||
		!strings.Contains(out, "signature required (by imsd's pinned keys and 1 further key(s)); otherwise refuse") ||
		!strings.Contains(out, "key "+agentproto.KeyID(vendorPub)+" (--key)") {
		t.Fatalf("require: %d %s", code, out)
	}
	st, err := permissions.Load(state)
	if err != nil {
		t.Fatal(err)
	}
	if !st.SupplyChain.RequireSignature || len(st.SupplyChain.Keys) != 1 {
		t.Fatalf("stored: %+v", st.SupplyChain)
	}
	if code, out := cmd("supply-chain", "--mode", "warn"); code != 0 || !strings.Contains(out, "otherwise warn") {
		t.Fatalf("warn: %d %s", code, out)
	}
	// Only the customer's own keys, not imsd's (a compromised imsd signs
	// with those): shown so, and never with no key at all.
	if code, out := cmd("supply-chain", "--no-imsd-keys"); code != 0 || !strings.Contains(out, "(by 1 key(s) of yours, not imsd's)") ||
		strings.Contains(out, "imsd key ") {
		t.Fatalf("--no-imsd-keys: %d %s", code, out)
	}
	if code, out := cmd("supply-chain", "--no-keys"); code != 2 || !strings.Contains(out, "nothing would be trusted") {
		t.Fatalf("--no-keys under --no-imsd-keys: %d %s", code, out)
	}
	if code, out := cmd("supply-chain", "--imsd-keys"); code != 0 || !strings.Contains(out, "by imsd's pinned keys and 1 further key(s)") {
		t.Fatalf("--imsd-keys: %d %s", code, out)
	}
	if code, out := cmd("supply-chain", "--mode", "maybe"); code != 2 || !strings.Contains(out, `--mode "maybe": want refuse or warn`) {
		t.Fatalf("bad mode: %d %s", code, out)
	}
	os.WriteFile(keyFile, []byte("not a key"), 0o644)
	if code, out := cmd("supply-chain", "--key", keyFile); code != 2 || !strings.Contains(out, "--key "+keyFile) {
		t.Fatalf("bad key: %d %s", code, out)
	}
	// Attestation and vulnerability rules.
	if code, out := cmd("supply-chain", "--require-attestation", "slsa-provenance:level>=2", "--require-attestation", "sbom", "--deny-vulnerabilities", "critical"); code != 0 ||
		!strings.Contains(out, "attestation slsa-provenance:level>=2 required, attestation sbom required, vulnerabilities of severity critical or above denied") {
		t.Fatalf("attestations: %d %s", code, out)
	}
	for _, bad := range []struct{ flag, value, want string }{
		{"--require-attestation", "slsa-provenance:level>=9", `--require-attestation "slsa-provenance:level>=9": the condition must be level>=N, N from 1 to 4`},
		{"--require-attestation", "sbom:x", `sbom takes no condition`},
		{"--require-attestation", "vex", `want slsa-provenance, slsa-provenance:level>=N or sbom`},
		{"--deny-vulnerabilities", "awful", `--deny-vulnerabilities "awful": want one of low, medium, high, critical`},
	} {
		if code, out := cmd("supply-chain", bad.flag, bad.value); code != 2 || !strings.Contains(out, bad.want) {
			t.Fatalf("%s %s: %d %s", bad.flag, bad.value, code, out)
		}
	}
	if code, out := cmd("supply-chain", "--mode", "refuse", "--warn-on", "require-attestation sbom", "--warn-on", "deny-vulnerabilities"); code != 0 ||
		!strings.Contains(out, "otherwise refuse (warn only: require-attestation sbom, deny-vulnerabilities)") {
		t.Fatalf("warn-on: %d %s", code, out)
	}
	if code, out := cmd("supply-chain", "--warn-on", "require-everything"); code != 2 || !strings.Contains(out, `--warn-on "require-everything": want require-signature`) {
		t.Fatalf("bad warn-on: %d %s", code, out)
	}
	if code, out := cmd("supply-chain", "--no-warn-on"); code != 0 || strings.Contains(out, "warn only") {
		t.Fatalf("no-warn-on: %d %s", code, out)
	}
	if code, out := cmd("supply-chain", "--no-require-attestations", "--deny-vulnerabilities", "none"); code != 0 || strings.Contains(out, "attestation") || strings.Contains(out, "vulnerabilities") {
		t.Fatalf("dropped: %d %s", code, out)
	}
	// The file is the customer's and signed: a hand edit is refused.
	b, _ := os.ReadFile(filepath.Join(state, permissions.FileName))
	os.WriteFile(filepath.Join(state, permissions.FileName), bytes.Replace(b, []byte(`"require_signature": true`), []byte(`"require_signature": false`), 1), 0o600)
	if !bytes.Contains(b, []byte(`"require_signature": true`)) {
		t.Fatalf("permissions.json lacks the policy:\n%s", b)
	}
	if _, err := permissions.Load(state); err == nil {
		t.Fatal("an edited permissions.json was accepted")
	}
	if code, _ := cmd("supply-chain", "--no-require-signature"); code != 1 {
		t.Fatalf("edited file: code %d", code)
	}
}
