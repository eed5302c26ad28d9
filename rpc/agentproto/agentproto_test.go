package agentproto

import (
	"crypto/ed25519"
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
)

func TestChallengeSignature(t *testing.T) {
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	otherPub, _, _ := ed25519.GenerateKey(nil)
	nonce := []byte("0123456789abcdef0123456789abcdef")
	sig := SignChallenge(key, "agt_a", nonce)
	if !VerifyChallenge(pub, "agt_a", nonce, sig) {
		t.Fatal("a good signature was refused")
	}
	for _, tc := range []struct {
		name    string
		pub     []byte
		agentID string
		nonce   []byte
	}{
		{"other key", otherPub, "agt_a", nonce},
		{"other agent", pub, "agt_b", nonce},
		// The agent id and nonce are separated: moving a byte from one to
		// the other must not give the same message.
		{"shifted boundary", pub, "agt_a0", nonce[1:]},
		{"other nonce", pub, "agt_a", []byte("0123456789abcdef0123456789abcdeX")},
		{"short key", pub[:16], "agt_a", nonce},
	} {
		if VerifyChallenge(tc.pub, tc.agentID, tc.nonce, sig) {
			t.Errorf("%s: signature accepted", tc.name)
		}
	}
	// A plain signature of the nonce (no context) is not a challenge answer.
	if VerifyChallenge(pub, "agt_a", nonce, ed25519.Sign(key, nonce)) {
		t.Error("a signature without the challenge context was accepted")
	}
}

func TestReplaceSecrets(t *testing.T) {
	secrets := map[string]string{"DB": "hunter2", "TOKEN": "t0k"}
	lookup := func(n string) (string, bool) { v, ok := secrets[n]; return v, ok }
	for _, tc := range []struct{ in, want, err string }{
		{in: "no refs", want: "no refs"},
		{in: SecretRef("DB"), want: "hunter2"},
		{in: "{{.secrets.DB}}:{{- .secrets.TOKEN -}}", want: "hunter2:t0k"},
		{in: "{{ .inputs.DB }}", want: "{{ .inputs.DB }}"},
		{in: "{{ .secrets.NOPE }} {{ .secrets.DB }}", err: `secret "NOPE" is not defined`},
	} {
		got, err := ReplaceSecrets(tc.in, lookup)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("ReplaceSecrets(%q) error = %v; want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ReplaceSecrets(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestReplaceInputs(t *testing.T) {
	vals := map[string]string{"admin_email": "ops@x"}
	lookup := func(n string) (string, bool) { v, ok := vals[n]; return v, ok }
	ours := func(n string) bool { return n == "admin_email" || n == "missing" }
	got, err := ReplaceInputs("to="+InputRef("admin_email")+" {{.inputs.other}} {{- .inputs.admin_email -}}", lookup, ours)
	if err != nil || got != "to=ops@x {{.inputs.other}} ops@x" {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := ReplaceInputs("{{ .inputs.missing }}", lookup, ours); err == nil || !strings.Contains(err.Error(), `"missing"`) {
		t.Errorf("missing: %v", err)
	}
	if n := InputNames("a {{ .inputs.x }} b {{.inputs.y}}"); len(n) != 2 || n[0] != "x" || n[1] != "y" {
		t.Errorf("names %v", n)
	}
}

// FuzzParseGrantExchangePassword: the exchange password is read on imsd's
// token endpoint before anything is authenticated. Whatever it is given,
// the parser never panics, and what it accepts writes back to itself.
func FuzzParseGrantExchangePassword(f *testing.F) {
	f.Add("grt_abc.sekret.1700000000123." + strings.Repeat("A", 86))
	f.Add("a.b.c.d")
	f.Add("....")
	f.Fuzz(func(t *testing.T, p string) {
		g, err := ParseGrantExchangePassword(p)
		if err != nil {
			return
		}
		if g.GrantID == "" || g.Secret == "" || len(g.Signature) != 64 {
			t.Fatalf("accepted %q as %+v", p, g)
		}
		again := g.GrantID + "." + g.Secret + "." + strconv.FormatInt(g.At.UnixMilli(), 10) + "." + base64.RawURLEncoding.EncodeToString(g.Signature)
		if g2, err := ParseGrantExchangePassword(again); err != nil || g2.GrantID != g.GrantID || g2.Secret != g.Secret || !g2.At.Equal(g.At) {
			t.Fatalf("%q does not read back: %+v, %v", again, g2, err)
		}
	})
}
