package agentproto

import (
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func testClaims(t *testing.T, pub ed25519.PublicKey) JobClaims {
	t.Helper()
	d, err := ConfigDigest(map[string]any{"steps": []any{map[string]any{"run": "echo hi"}}, "n": 3.0})
	if err != nil {
		t.Fatal(err)
	}
	return JobClaims{
		KeyID: KeyID(pub), InstallID: "ins_1", AgentID: "agt_1", JobID: "job_1", Attempt: 2, FencingToken: 77,
		Mode: "provision", Component: "web", ComponentType: "action", Operation: "apply", TimeoutSeconds: 600,
		ConfigDigest: d, Expires: t0.Add(time.Minute),
	}
}

// Every claim is covered: changing any one of them (by reflection, so a
// field added later is covered too) makes the signature fail.
func TestJobSignatureCoversEveryClaim(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	keys := map[string]ed25519.PublicKey{KeyID(pub): pub}
	c := testClaims(t, pub)
	sig := SignJob(key, &c)
	if err := VerifyJob(keys, &c, sig, t0); err != nil {
		t.Fatalf("a good signature was refused: %v", err)
	}
	rt := reflect.TypeOf(c)
	for i := range rt.NumField() {
		f := rt.Field(i)
		t.Run(f.Name, func(t *testing.T) {
			tc := c
			v := reflect.ValueOf(&tc).Elem().Field(i)
			switch f.Type.Kind() {
			case reflect.String:
				v.SetString(v.String() + "x")
			case reflect.Int64:
				v.SetInt(v.Int() + 1)
			case reflect.Array:
				v.Index(0).SetUint(v.Index(0).Uint() ^ 1)
			case reflect.Struct: // time.Time
				tc.Expires = tc.Expires.Add(time.Millisecond)
			case reflect.Pointer: // Grant: adding one (TestJobClaimsGrant changes its fields)
				tc.Grant = &GrantClaims{ID: "g"}
			case reflect.Bool:
				v.SetBool(!v.Bool())
			default:
				t.Fatalf("field %s of kind %s: teach this test to change it", f.Name, f.Type.Kind())
			}
			if string(tc.Message()) == string(c.Message()) {
				t.Fatalf("changing %s does not change the signed message", f.Name)
			}
			err := VerifyJob(keys, &tc, sig, t0)
			if f.Name == "KeyID" {
				if !errors.Is(err, ErrUnknownKey) {
					t.Fatalf("another key id: got %v, want ErrUnknownKey", err)
				}
				// The same key under the changed id still refuses it.
				keys2 := map[string]ed25519.PublicKey{tc.KeyID: pub}
				err = VerifyJob(keys2, &tc, sig, t0)
			}
			if !errors.Is(err, ErrBadSignature) {
				t.Fatalf("changed %s: got %v, want ErrBadSignature", f.Name, err)
			}
		})
	}
}

func TestVerifyJobRefusals(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	otherPub, otherKey, _ := ed25519.GenerateKey(nil)
	keys := map[string]ed25519.PublicKey{KeyID(pub): pub}
	c := testClaims(t, pub)
	sig := SignJob(key, &c)

	if err := VerifyJob(keys, &c, nil, t0); !errors.Is(err, ErrUnsigned) {
		t.Errorf("no signature: got %v", err)
	}
	if err := VerifyJob(keys, &c, sig, c.Expires); err != nil {
		t.Errorf("at the expiry itself: %v", err)
	}
	err := VerifyJob(keys, &c, sig, c.Expires.Add(time.Millisecond))
	if !errors.Is(err, ErrExpired) || !strings.Contains(err.Error(), "clock") {
		t.Errorf("expired: got %v", err)
	}
	// Signed by another key that claims to be imsd's.
	sig2 := SignJob(otherKey, &c)
	if err := VerifyJob(keys, &c, sig2, t0); !errors.Is(err, ErrBadSignature) {
		t.Errorf("another key under imsd's id: got %v", err)
	}
	// Signed by another key under its own id.
	c3 := c
	c3.KeyID = KeyID(otherPub)
	sig3 := SignJob(otherKey, &c3)
	if err := VerifyJob(keys, &c3, sig3, t0); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("unknown key: got %v", err)
	}
	// A challenge signature over the same bytes is not a job signature.
	if err := VerifyJob(keys, &c, ed25519.Sign(key, c.Message()[len(jobContext):]), t0); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a signature without the context: got %v", err)
	}
}

// Strings are length-prefixed: moving bytes from one string claim to the
// next gives another message.
func TestJobMessageBoundaries(t *testing.T) {
	a := JobClaims{InstallID: "ins_1", JobID: "job"}
	b := JobClaims{InstallID: "ins_1j", JobID: "ob"}
	if string(a.Message()) == string(b.Message()) {
		t.Fatal("shifting a byte between install and job id gives the same message")
	}
	c := JobClaims{ComponentType: "ac", Operation: "tionapply"}
	d := JobClaims{ComponentType: "action", Operation: "apply"}
	if string(c.Message()) == string(d.Message()) {
		t.Fatal("shifting bytes between type and operation gives the same message")
	}
}

// The agent's id is signed after the install's (format v2): the same
// assignment signed for agent A does not verify as agent B's.
func TestJobSignatureNamesTheAgent(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	keys := map[string]ed25519.PublicKey{KeyID(pub): pub}
	c := testClaims(t, pub)
	sig := SignJob(key, &c)
	b := c
	b.AgentID = "agt_2"
	if err := VerifyJob(keys, &b, sig, t0); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("agent A's assignment verified for agent B: %v", err)
	}
	want := "byoc job signature v2\x00" + "\x00\x00\x00\x01k" + "\x00\x00\x00\x02in" + "\x00\x00\x00\x03agt" + "\x00\x00\x00\x01j"
	m := JobClaims{KeyID: "k", InstallID: "in", AgentID: "agt", JobID: "j"}
	if got := string(m.Message()); !strings.HasPrefix(got, want) {
		t.Fatalf("message starts %q, want %q", got[:len(want)], want)
	}
}

func TestConfigDigest(t *testing.T) {
	// A fixed vector, so that the encoding never changes unnoticed (the
	// recipe of docs/design/signed-jobs.md computes the same).
	d, err := ConfigDigest(map[string]any{"b": []any{true, nil, 1.5}, "a": "x"})
	if err != nil {
		t.Fatal(err)
	}
	// The encoding spelt out by hand, as the recipe of
	// docs/design/signed-jobs.md writes it.
	enc := "o\x00\x00\x00\x02" +
		"\x00\x00\x00\x01a" + "s\x00\x00\x00\x01x" +
		"\x00\x00\x00\x01b" + "l\x00\x00\x00\x03" + "t" + "n" + "d\x3f\xf8\x00\x00\x00\x00\x00\x00"
	sum := sha256.Sum256([]byte(enc))
	if d != sum {
		t.Fatalf("digest %x is not the SHA-256 of the documented encoding (%x)", d, sum)
	}

	same := func(a, b map[string]any) bool {
		da, err1 := ConfigDigest(a)
		db, err2 := ConfigDigest(b)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		return da == db
	}
	// Map order does not matter; every value does.
	m1 := map[string]any{}
	m2 := map[string]any{}
	for i := range 50 {
		m1[strconv.Itoa(i*7919)] = float64(i)
	}
	for i := 49; i >= 0; i-- {
		m2[strconv.Itoa(i*7919)] = float64(i)
	}
	if !same(m1, m2) {
		t.Error("the same map built in another order has another digest")
	}
	if !same(nil, map[string]any{}) {
		t.Error("a nil config and an empty one differ")
	}
	for _, tc := range []struct {
		name string
		a, b map[string]any
	}{
		{"string value", map[string]any{"a": "x"}, map[string]any{"a": "y"}},
		{"key", map[string]any{"a": "x"}, map[string]any{"b": "x"}},
		{"number", map[string]any{"a": 1.0}, map[string]any{"a": 1.0000000001}},
		{"negative zero", map[string]any{"a": 0.0}, map[string]any{"a": math.Copysign(0, -1)}},
		{"type", map[string]any{"a": "1"}, map[string]any{"a": 1.0}},
		{"null and false", map[string]any{"a": nil}, map[string]any{"a": false}},
		{"list order", map[string]any{"a": []any{"x", "y"}}, map[string]any{"a": []any{"y", "x"}}},
		{"nesting", map[string]any{"a": []any{[]any{}}}, map[string]any{"a": []any{}}},
		{"list and object", map[string]any{"a": []any{}}, map[string]any{"a": map[string]any{}}},
		{"key and value boundary", map[string]any{"ab": "c"}, map[string]any{"a": "bc"}},
	} {
		if same(tc.a, tc.b) {
			t.Errorf("%s: different configs have one digest", tc.name)
		}
	}
	if _, err := ConfigDigest(map[string]any{"a": 1}); err == nil {
		t.Error("an int (not a decoded JSON number) was encoded")
	}
	deep := map[string]any{}
	cur := deep
	for range 150 {
		next := map[string]any{}
		cur["a"] = next
		cur = next
	}
	if _, err := ConfigDigest(deep); err == nil {
		t.Error("a config nested 150 deep was encoded")
	}
}

// TestJobClaimsGrant: a grant changes the signed bytes (so a grant cannot
// be added, removed or changed without breaking the signature), and a
// job without one signs what it signed before grants existed.
func TestJobClaimsGrant(t *testing.T) {
	c := JobClaims{KeyID: "k", InstallID: "in", JobID: "j", Expires: time.UnixMilli(1)}
	plain := string(c.Message())
	g := &GrantClaims{ID: "g", Secret: "s", Registry: "http://r", Service: "svc", Scopes: []string{"repository:web:pull"}, Expires: time.UnixMilli(2)}
	c.Grant = g
	with := string(c.Message())
	if !strings.HasPrefix(with, plain) || with == plain {
		t.Fatalf("a grant must append to the signed bytes")
	}
	for name, change := range map[string]func(*GrantClaims){
		"scope":    func(g *GrantClaims) { g.Scopes = []string{"repository:db:pull"} },
		"registry": func(g *GrantClaims) { g.Registry = "http://evil" },
		"secret":   func(g *GrantClaims) { g.Secret = "t" },
		"expiry":   func(g *GrantClaims) { g.Expires = time.UnixMilli(3) },
	} {
		cp := *g
		cp.Scopes = append([]string{}, g.Scopes...)
		change(&cp)
		c.Grant = &cp
		if string(c.Message()) == with {
			t.Errorf("changing the grant's %s leaves the signed bytes", name)
		}
	}
}

func TestGrantExchangePassword(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	at := time.UnixMilli(1700000000123)
	p := GrantExchangePassword(priv, "agt_1", "grt_1", "sekret", at)
	g, err := ParseGrantExchangePassword(p)
	if err != nil || g.GrantID != "grt_1" || g.Secret != "sekret" || !g.At.Equal(at) {
		t.Fatalf("parse %q: %+v, %v", p, g, err)
	}
	if !g.Verify(pub, "agt_1") {
		t.Fatal("signature does not verify")
	}
	if g.Verify(pub, "agt_2") {
		t.Fatal("verifies for another agent")
	}
	for _, bad := range []string{"", "a.b.c", "g.s.x.sig", "g.s.1.short", ".s.1." + strings.Repeat("A", 86)} {
		if _, err := ParseGrantExchangePassword(bad); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
}
