package agentproto

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// The encoding docs/plugin-author/README.md documents (Approved plans), computed by hand for one change.
func TestPlanDigestEncoding(t *testing.T) {
	str := func(s string) []byte { return append(binary.BigEndian.AppendUint32(nil, uint32(len(s))), s...) }
	var enc []byte
	enc = append(enc, "byoc plan digest v1\x00"...)
	enc = binary.BigEndian.AppendUint32(enc, 1)
	enc = append(enc, str("file.a")...)
	enc = append(enc, str("create")...)
	enc = append(enc, str("")...)
	enc = append(enc, 'n')             // before: none
	enc = append(enc, 'o', 0, 0, 0, 1) // after: {"x": "y"}
	enc = append(enc, str("x")...)
	enc = append(enc, 's')
	enc = append(enc, str("y")...)
	sum := sha256.Sum256(enc)
	want := "sha256:" + hex.EncodeToString(sum[:])
	got, err := PlanDigest([]PlanChange{{Address: "file.a", Action: "create", After: map[string]any{"x": "y"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("PlanDigest = %s, want %s", got, want)
	}
	if h, ok := PlanDigestHex(got); !ok || h != want[len("sha256:"):] {
		t.Fatalf("PlanDigestHex(%s) = %q, %v", got, h, ok)
	}
}

// The digest does not depend on the order of the changes, and changes
// with every part of every change.
func TestPlanDigestOrderAndParts(t *testing.T) {
	a := PlanChange{Address: "a", Action: "update", Summary: "s", Before: map[string]any{"n": 1.0}, After: map[string]any{"n": 2.0}}
	b := PlanChange{Address: "b", Action: "delete", Before: "x"}
	d1, _ := PlanDigest([]PlanChange{a, b})
	d2, _ := PlanDigest([]PlanChange{b, a})
	if d1 != d2 {
		t.Fatalf("order changes the digest: %s vs %s", d1, d2)
	}
	empty, _ := PlanDigest(nil)
	if empty == d1 {
		t.Fatal("no changes has the digest of two")
	}
	for name, c := range map[string]PlanChange{
		"address": {Address: "a2", Action: a.Action, Summary: a.Summary, Before: a.Before, After: a.After},
		"action":  {Address: a.Address, Action: "replace", Summary: a.Summary, Before: a.Before, After: a.After},
		"summary": {Address: a.Address, Action: a.Action, Summary: "t", Before: a.Before, After: a.After},
		"before":  {Address: a.Address, Action: a.Action, Summary: a.Summary, Before: map[string]any{"n": 0.0}, After: a.After},
		"after":   {Address: a.Address, Action: a.Action, Summary: a.Summary, Before: a.Before, After: map[string]any{"n": 3.0}},
		// Moving a value from after to before is another plan.
		"swap": {Address: a.Address, Action: a.Action, Summary: a.Summary, Before: a.After, After: a.Before},
	} {
		d, err := PlanDigest([]PlanChange{c, b})
		if err != nil {
			t.Fatal(err)
		}
		if d == d1 {
			t.Errorf("changing the %s does not change the digest", name)
		}
	}
	if _, err := PlanDigest([]PlanChange{{Address: "x", After: 3}}); err == nil || !strings.Contains(err.Error(), "planned change 0 (x)") {
		t.Fatalf("an int value: got %v, want an error naming the change", err)
	}
	for _, bad := range []string{"", "sha256:", "sha256:" + strings.Repeat("A", 64), "md5:" + strings.Repeat("a", 64), "sha256:" + strings.Repeat("a", 63)} {
		if _, ok := PlanDigestHex(bad); ok {
			t.Errorf("PlanDigestHex(%q) accepted it", bad)
		}
	}
}

// A job without an approved plan signs the same bytes as before plan
// digests existed (its message ends with the expiry); with one, the
// digest follows, and a signature made without it does not verify.
func TestJobSignatureApprovedPlanDigest(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	keys := map[string]ed25519.PublicKey{KeyID(pub): pub}
	c := testClaims(t, pub)
	m := c.Message()
	if got := binary.BigEndian.Uint64(m[len(m)-8:]); got != uint64(c.Expires.UnixMilli()) {
		t.Fatalf("the message without a plan digest no longer ends with the expiry")
	}
	unbound := SignJob(key, &c)
	c.ApprovedPlanDigest = "sha256:" + strings.Repeat("ab", 32)
	if err := VerifyJob(keys, &c, unbound, t0); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("a signature without the digest verified a job that carries one: %v", err)
	}
	if err := VerifyJob(keys, &c, SignJob(key, &c), t0); err != nil {
		t.Fatal(err)
	}
}

// CheckPlanValue bounds a planned change's value exactly where PlanDigest
// does, with the path from the value's top.
func TestCheckPlanValueIsPlanDigestsDepthLimit(t *testing.T) {
	for _, n := range []int{0, 1, MaxConfigDepth - 1, MaxConfigDepth, MaxConfigDepth + 1, 3 * MaxConfigDepth} {
		v := nested(n)
		err := CheckPlanValue(v)
		_, derr := PlanDigest([]PlanChange{{Address: "x", Action: "update", After: v}})
		if (err == nil) != (n <= MaxConfigDepth) || (err == nil) != (derr == nil) {
			t.Errorf("%d levels: CheckPlanValue %v, PlanDigest %v; want both to refuse only past %d", n, err, derr, MaxConfigDepth)
		}
		var ce *ConfigError
		if err != nil && (!errors.As(err, &ce) || !strings.HasPrefix(ce.Path, ".a.a") || ce.Problem != "nested deeper than 100 levels (the limit is 100)") {
			t.Errorf("%d levels: %#v, want a ConfigError with the path and the limit", n, err)
		}
	}
	if err := CheckPlanValue([]any{"x", 1.0, map[string]any{"k": nil}}); err != nil {
		t.Errorf("a shallow list: %v", err)
	}
}

// The window-bound flag is signed: stripped or added on the path, the
// signature fails; a job without it signs the bytes it did before.
func TestJobSignatureWindowBound(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	keys := map[string]ed25519.PublicKey{KeyID(pub): pub}
	c := testClaims(t, pub)
	before := string(c.Message())
	free := SignJob(key, &c)
	c.WindowBound = true
	if err := VerifyJob(keys, &c, free, t0); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("a signature without the flag verified a window-bound job: %v", err)
	}
	bound := SignJob(key, &c)
	if err := VerifyJob(keys, &c, bound, t0); err != nil {
		t.Fatal(err)
	}
	c.WindowBound = false
	if err := VerifyJob(keys, &c, bound, t0); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("the flag stripped still verified: %v", err)
	}
	if string(c.Message()) != before {
		t.Fatal("a job without the flag no longer signs the same bytes")
	}
}
