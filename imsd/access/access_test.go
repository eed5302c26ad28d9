package access

import (
	"strings"
	"testing"
)

func mustScope(t *testing.T, s string) Scope {
	t.Helper()
	sc, err := ParseScope(s)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// Each scope kind covers what it should: everything covers the vendor
// too; app covers the app and its installs; install and selector scopes
// cover installs only.
func TestScopeCovers(t *testing.T) {
	acme := Target{Install: "acme", App: "shop", Labels: map[string]string{"customer": "acme", "env": "prod"}}
	globex := Target{Install: "globex", App: "shop", Labels: map[string]string{"customer": "globex", "env": "prod"}}
	other := Target{Install: "x", App: "crm"}
	vendor := Target{}
	shop := Target{App: "shop"}
	// The build agent's install: no labels, which negative selectors
	// match, yet no selector covers it.
	build := Target{Install: "_vendor", App: "_vendor", Vendor: true}
	for _, c := range []struct {
		scope string
		want  []bool // acme, globex, other, vendor, shop, build
	}{
		{"", []bool{true, true, true, true, true, true}},
		{"install:acme", []bool{true, false, false, false, false, false}},
		{"app:shop", []bool{true, true, false, false, true, false}},
		{"selector:customer=acme", []bool{true, false, false, false, false, false}},
		{"selector:env=prod,customer!=acme", []bool{false, true, false, false, false, false}},
		{"selector:customer in (acme,globex)", []bool{true, true, false, false, false, false}},
		{"selector:customer!=acme", []bool{false, true, true, false, false, false}},
		{"selector:!legacy", []bool{true, true, true, false, false, false}},
	} {
		sc := mustScope(t, c.scope)
		for i, tg := range []Target{acme, globex, other, vendor, shop, build} {
			if got := sc.Covers(tg); got != c.want[i] {
				t.Errorf("%q covers %+v = %v, want %v", c.scope, tg, got, c.want[i])
			}
		}
		if again := mustScope(t, sc.String()); again.String() != sc.String() {
			t.Errorf("%q does not round-trip: %q", c.scope, again.String())
		}
	}
	for _, bad := range []string{"install:", "app", "tenant:acme", "selector:", "selector:a=(", "selector:,"} {
		if _, err := ParseScope(bad); err == nil {
			t.Errorf("ParseScope(%q) succeeded", bad)
		}
	}
}

// The role table: what each role allows.
func TestRoleTable(t *testing.T) {
	want := map[Role]string{
		Viewer:   "read",
		Operator: "read deploy debug",
		Support:  "read debug break-glass",
		Admin:    "read deploy debug break-glass manage",
	}
	for _, r := range Roles {
		var got []string
		for _, p := range Perms {
			if r.Allows(p) {
				got = append(got, string(p))
			}
		}
		if strings.Join(got, " ") != want[r] {
			t.Errorf("%s allows %v, want %s", r, got, want[r])
		}
	}
}

// A refusal names the principal, the roles it holds and where, the
// target and the roles that would do.
func TestRefusal(t *testing.T) {
	p := Principal{Kind: "user", Name: "ann@example.com", Grants: []Grant{{Role: Support, Scope: mustScope(t, "selector:customer=acme"), Source: "group support-acme"}}}
	globex := Target{Install: "globex", App: "shop", Labels: map[string]string{"customer": "globex"}}
	if _, ok := p.Can(BreakGlass, globex); ok {
		t.Fatal("support on customer=acme may request break-glass on globex")
	}
	if g, ok := p.Can(BreakGlass, Target{Install: "acme", App: "shop", Labels: map[string]string{"customer": "acme"}}); !ok || g.Source != "group support-acme" {
		t.Fatalf("Can on acme = %v, %v", g, ok)
	}
	got := p.Refusal("request break-glass on", BreakGlass, globex)
	want := "permission denied: user ann@example.com holds role support on installs with labels customer=acme, so may not request break-glass on install globex: that needs the break-glass permission, which role support or admin has, granted on install globex"
	if got != want {
		t.Errorf("refusal:\n%s\nwant\n%s", got, want)
	}
}
