package sso

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A bad SSO config is refused with its file, line or field named.
func TestLoadNamesTheMistake(t *testing.T) {
	good := "issuer = \"https://idp.example.com\"\nclient_id = \"byoc\"\n[[group]]\nname = \"sre\"\nrole = \"admin\"\n[[group]]\nname = \"acme\"\nrole = \"support\"\nselector = \"customer=acme\"\n"
	for _, c := range []struct{ body, want string }{
		{"issuer = \"x\"\nclient_id = \"y\"\nbogus = 1\n", "bogus"},
		{"issuer = \nclient_id = \"y\"\n", "sso.toml:1"},
		{"client_id = \"y\"\n", "issuer: is required"},
		{"issuer = \"x\"\nclient_id = \"y\"\n[[group]]\nname = \"a\"\nrole = \"root\"\n", "group[0].role: unknown role \"root\""},
		{"issuer = \"x\"\nclient_id = \"y\"\n[[group]]\nname = \"a\"\nrole = \"viewer\"\ninstall = \"a\"\napp = \"b\"\n", "group[0]: give at most one"},
		{"issuer = \"x\"\nclient_id = \"y\"\n[[group]]\nname = \"a\"\nrole = \"viewer\"\nselector = \"a=(\"\n", "group[0].selector"},
	} {
		path := filepath.Join(t.TempDir(), "sso.toml")
		if err := os.WriteFile(path, []byte(c.body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one naming %q", c.body, err, c.want)
		}
	}
	path := filepath.Join(t.TempDir(), "sso.toml")
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.grants()
	if err != nil || len(g["acme"]) != 1 || g["acme"][0].String() != "support on installs with labels customer=acme (group acme)" || g["sre"][0].Scope.String() != "" {
		t.Fatalf("grants %v, %v", g, err)
	}
}
