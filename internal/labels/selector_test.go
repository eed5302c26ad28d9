package labels

import (
	"strings"
	"testing"

	k8slabels "k8s.io/apimachinery/pkg/labels"
)

// labelSets are what differential checks match selectors against.
var labelSets = []map[string]string{
	nil,
	{"tier": "canary"},
	{"tier": "prod", "region": "eu"},
	{"tier": "", "region": "us", "n": "5"},
	{"n": "10", "example.com/team": "a", "in": "notin"},
	{"a": "b", "x": "", "z": "1"},
}

// same checks that Parse and Kubernetes' labels.Parse agree on s: both
// refuse it, or both accept it and match every label set alike.
func same(t *testing.T, s string) {
	t.Helper()
	if strings.IndexByte(s, 0) >= 0 {
		return // Kubernetes' lexer stops at a NUL; Parse refuses it
	}
	got, err := Parse(s)
	want, kerr := k8slabels.Parse(s)
	if (err == nil) != (kerr == nil) {
		t.Fatalf("Parse(%q): error %v, Kubernetes: %v", s, err, kerr)
	}
	if err != nil {
		return
	}
	sets := append(labelSets, keysOf(got))
	for _, l := range sets {
		if g, w := got.Matches(l), want.Matches(k8slabels.Set(l)); g != w {
			t.Fatalf("Parse(%q).Matches(%v) = %v, Kubernetes says %v", s, l, g, w)
		}
	}
	// The string form parses back to the same selector.
	again, err := Parse(got.String())
	if err != nil {
		t.Fatalf("Parse(%q).String() = %q does not parse: %v", s, got.String(), err)
	}
	if again.String() != got.String() {
		t.Fatalf("Parse(%q): String %q parses to %q", s, got.String(), again.String())
	}
}

// keysOf is a label set with each value the selector names, so fuzzed
// selectors meet labels they can match.
func keysOf(s Selector) map[string]string {
	m := map[string]string{}
	for _, r := range s.reqs {
		if len(r.Values) > 0 {
			m[r.Key] = r.Values[len(r.Values)-1]
		} else {
			m[r.Key] = "v"
		}
	}
	return m
}

var seeds = []string{
	"", " ", "tier=canary", "tier==canary", "tier!=canary", "region in (eu,us)", "region notin (ap)",
	"customer", "!customer", "tier=canary,region in (eu, us),!legacy", "n>5", "n<11", "n>x",
	"x in (foo,,baz),y,z notin ()", "a in ()", "a in (,)", "a in (b,)", "a in (,b)", "in=notin", "a in (in,notin)",
	"a=", "a=,b", "a!=", "!a=b", "!a,b", "a b", "a=b c", "a=b,", ",a", "a,,b", "a=(b)", "example.com/team=a",
	"Example.com/team=a", "/a", "a/", "a/b/c", "a=b=c", "a==b", "a===b", "a<=1", "a>=1", "a in b", "a in (b",
	"a in (b c)", "(", ")", "!", "!!a", "a!", "tier=" + strings.Repeat("x", 64), strings.Repeat("k", 64), "a=-b", "a=b-",
	"a\tin\n(b)", "a=é", "é", "a=b\r", "a.b_c-d=1.2_3-4",
}

func TestParseAgreesWithKubernetes(t *testing.T) {
	for _, s := range seeds {
		same(t, s)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		same(t, s)
	})
}

func TestMatches(t *testing.T) {
	l := map[string]string{"tier": "canary", "region": "eu"}
	for sel, want := range map[string]bool{
		"": true, "tier=canary": true, "tier!=canary": false, "tier in (canary,prod)": true,
		"region notin (eu)": false, "customer": false, "!customer": true, "tier,region=eu": true,
		"missing!=x": true, "missing notin (x)": true, "missing in (x)": false,
	} {
		if got := MustParse(sel).Matches(l); got != want {
			t.Errorf("%q.Matches(%v) = %v, want %v", sel, l, got, want)
		}
	}
}

func TestParseErrorsNameTheProblem(t *testing.T) {
	for sel, want := range map[string]string{
		"Tier!=x=y":       `found "=" after Tier!=x, expected ',' or the end`,
		"ti er=x":         `found "er"`,
		"-tier=x":         `label key "-tier": the name must be letters`,
		"tier=can ary":    `found "ary" after tier=can`,
		"tier=" + "x_":    `label "tier": the value "x_" must be empty or`,
		"n>x":             `the value "x" of > or < must be an integer`,
		"region in eu":    `found "eu", expected '(' after in/notin`,
		"example.COM/t=a": `the prefix must be a DNS subdomain`,
		"!a=b":            `!a takes no operator or value`,
		"a=b\x00":         `a NUL byte at offset 3`,
	} {
		_, err := Parse(sel)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", sel, err, want)
		}
	}
}

func TestChange(t *testing.T) {
	c, err := ParseChange([]string{"tier=canary", "region-", "team="})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Apply(map[string]string{"region": "eu", "tier": "canary"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if Format(got) != "team=,tier=canary" {
		t.Errorf("Apply = %q", Format(got))
	}
	if _, err := c.Apply(map[string]string{"tier": "prod"}, false); err == nil || !strings.Contains(err.Error(), `label "tier" already has a value ("prod"); pass overwrite`) {
		t.Errorf("Apply over prod without overwrite: %v", err)
	}
	if got, err := c.Apply(map[string]string{"tier": "prod"}, true); err != nil || got["tier"] != "canary" {
		t.Errorf("Apply with overwrite = %v, %v", got, err)
	}
	for _, args := range [][]string{{"tier"}, {"a=b", "a-"}, {"Bad Key=x"}, {"k=bad value"}} {
		if _, err := ParseChange(args); err == nil {
			t.Errorf("ParseChange(%q) accepted", args)
		}
	}
}

func TestValidateNamesTheKey(t *testing.T) {
	err := Validate(map[string]string{"ok": "1", "bad key": "x"})
	if err == nil || !strings.Contains(err.Error(), `label key "bad key"`) {
		t.Errorf("Validate = %v", err)
	}
	if err := Validate(map[string]string{"ok": strings.Repeat("v", 64)}); err == nil || !strings.Contains(err.Error(), `label "ok": the value is longer than 63`) {
		t.Errorf("Validate long value = %v", err)
	}
}
