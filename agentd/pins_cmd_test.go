package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/pluginhost"
)

// agentd plugin pin|unpin|list keep the customer's pin file (issue 29:
// pins were only --plugin-pin flags, so re-pinning took a restart).
func TestPinsCmd(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(t.TempDir(), "byoc-plugin-kvfile")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256([]byte("#!/bin/sh\n"))
	sum := hex.EncodeToString(h[:])
	now := time.Date(2026, 11, 27, 23, 0, 0, 0, time.UTC)
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := pinsCmd(append([]string{"--state-dir", dir}, args...), &out, &errOut, now)
		return code, out.String(), errOut.String()
	}
	if code, out, _ := run("list"); code != 0 || !strings.Contains(out, "no plugin pins") {
		t.Fatalf("list of none: %d %q", code, out)
	}
	if code, out, errOut := run("pin", "kvfile", "--file", bin); code != 0 || out != "pinned kvfile: "+sum+"\n" {
		t.Fatalf("pin --file: %d %q %q", code, out, errOut)
	}
	other := strings.Repeat("0f", 32)
	if code, out, errOut := run("pin", "kvfile", other); code != 0 || !strings.Contains(out, "re-pinned kvfile: "+other+" (was "+sum+")") {
		t.Fatalf("re-pin: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := run("pin", "kvfile", "xyz"); code != 2 || !strings.Contains(errOut, `sha256 "xyz": want 64 lowercase hex digits`) {
		t.Fatalf("bad sum: %d %q", code, errOut)
	}
	if code, out, _ := run("list"); code != 0 || !strings.Contains(out, "kvfile  "+other+"  2026-11-27T23:00:00Z") {
		t.Fatalf("list: %d %q", code, out)
	}
	pf, err := pluginhost.ReadPins(filepath.Join(dir, pluginhost.PinFileName))
	if err != nil || pf.Pins["kvfile"].SHA256 != other || pf.Pins["kvfile"].PinnedBy == "" {
		t.Fatalf("pin file: %+v, %v", pf, err)
	}
	if code, out, _ := run("unpin", "kvfile"); code != 0 || out != "unpinned kvfile\n" {
		t.Fatalf("unpin: %d %q", code, out)
	}
	if code, _, errOut := run("unpin", "kvfile"); code != 1 || !strings.Contains(errOut, "kvfile is not pinned") {
		t.Fatalf("unpin again: %d %q", code, errOut)
	}
	for _, tc := range []struct {
		args []string
		want bool
	}{{[]string{"pin", "x", "y"}, true}, {[]string{"--state-dir", "d", "list"}, true}, {[]string{"action"}, false}, {[]string{"--help"}, true}, {nil, false}} {
		if got := isPinsCmd(tc.args); got != tc.want {
			t.Errorf("isPinsCmd(%q) = %v", tc.args, got)
		}
	}
}
