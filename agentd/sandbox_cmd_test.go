package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"
)

// agentd preflight shows the sandbox vendor code would run in: passing
// with bubblewrap, off under --insecure-no-sandbox, failing (and failing
// the preflight) when none can be built.
func TestPreflightShowsTheSandbox(t *testing.T) {
	preflightRow := func(t *testing.T, args ...string) (string, int) {
		t.Helper()
		var out, errb bytes.Buffer
		code := preflightCmd(context.Background(), append([]string{"--state-dir", t.TempDir(), "--role", "build"}, args...), &out, &errb)
		m := regexp.MustCompile(`(?m)^vendor code sandbox .*$`).FindString(out.String())
		if m == "" {
			t.Fatalf("no sandbox row:\n%s%s", out.String(), errb.String())
		}
		return m, code
	}
	if row, _ := preflightRow(t, "--sandbox", "bubblewrap"); !regexp.MustCompile(`pass\s+bubblewrap: bubblewrap \(bubblewrap \d`).MatchString(row) {
		t.Errorf("with bubblewrap: %q", row)
	}
	if row, _ := preflightRow(t, "--insecure-no-sandbox"); !regexp.MustCompile(`off\s+none-insecure: NONE \(--insecure-no-sandbox\)`).MatchString(row) {
		t.Errorf("insecure: %q", row)
	}
	t.Setenv("PATH", "/nonexistent")
	row, code := preflightRow(t, "--sandbox", "bubblewrap")
	if !regexp.MustCompile(`FAIL\s+no sandbox for vendor code can be built here: bubblewrap \(bwrap\) is not installed.*--insecure-no-sandbox`).MatchString(row) || code != 1 {
		t.Errorf("without bubblewrap: exit %d, %q", code, row)
	}
}

// agentd preflight shows vendor code's network: the proxy and its
// exceptions by default, off under --sandbox-network=host, failing on a
// bad egress flag.
func TestPreflightShowsTheNetwork(t *testing.T) {
	row := func(t *testing.T, args ...string) (string, int) {
		t.Helper()
		var out, errb bytes.Buffer
		code := preflightCmd(context.Background(), append([]string{"--state-dir", t.TempDir(), "--role", "build", "--ims", "http://127.0.0.1:1"}, args...), &out, &errb)
		m := regexp.MustCompile(`(?m)^vendor code network .*$`).FindString(out.String())
		if m == "" {
			t.Fatalf("no network row:\n%s%s", out.String(), errb.String())
		}
		return m, code
	}
	if r, _ := row(t, "--sandbox", "bubblewrap", "--insecure-sandbox-egress-allow", "127.0.0.1:5000"); !regexp.MustCompile(`pass\s+egress proxy only: loopback, link-local, the instance metadata .*; exceptions 127.0.0.1:5000, 127.0.0.1:1$`).MatchString(r) {
		t.Errorf("default: %q", r)
	}
	if r, _ := row(t, "--sandbox", "bubblewrap", "--sandbox-network", "host"); !regexp.MustCompile(`off\s+HOST network \(--sandbox-network=host\)`).MatchString(r) {
		t.Errorf("host: %q", r)
	}
	if r, code := row(t, "--sandbox", "bubblewrap", "--sandbox-egress-deny", "nope"); !regexp.MustCompile(`FAIL\s+--sandbox-egress-deny "nope"`).MatchString(r) || code != 1 {
		t.Errorf("bad flag: exit %d, %q", code, r)
	}
}
