package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// Asking for help is not a mistake: agentd and each of its subcommands
// print their usage on stdout and exit 0 for -h and --help (issue 33,
// item 17); a bad flag still exits 2 with the usage on stderr.
func TestHelpExitsZero(t *testing.T) {
	now := time.Now()
	cmds := map[string]func(args []string, stdout, stderr io.Writer) int{
		"breakglass": func(a []string, o, e io.Writer) int {
			return breakglassCmd(context.Background(), a, nil, o, e, time.Now)
		},
		"permissions": func(a []string, o, e io.Writer) int { return permissionsCmd(a, o, e, now) },
		"window":      func(a []string, o, e io.Writer) int { return windowCmd(a, o, e, now) },
		"plugin":      func(a []string, o, e io.Writer) int { return pinsCmd(a, o, e, now) },
		"audit": func(a []string, o, e io.Writer) int {
			return auditCmd(context.Background(), a, o, e, time.Now)
		},
		"identity": func(a []string, o, e io.Writer) int {
			return identityCmd(context.Background(), a, o, e, time.Now)
		},
		"session": func(a []string, o, e io.Writer) int {
			return sessionCmd(context.Background(), a, o, e, time.Now)
		},
		"egress":         func(a []string, o, e io.Writer) int { return egressCmd(a, o, e, time.Now) },
		"telemetry":      func(a []string, o, e io.Writer) int { return telemetryCmd(a, o, e, time.Now) },
		"module":         func(a []string, o, e io.Writer) int { return moduleCmd(context.Background(), a, o, e) },
		"preflight":      func(a []string, o, e io.Writer) int { return preflightCmd(context.Background(), a, o, e) },
		"support-bundle": func(a []string, o, e io.Writer) int { return supportBundleCmd(context.Background(), a, o, e) },
	}
	for name, cmd := range cmds {
		asks := [][]string{{"--help"}, {"-h"}}
		if name != "preflight" && name != "support-bundle" {
			asks = append(asks, []string{"list", "--help"}) // flags may follow a word
		}
		for _, h := range asks {
			var out, errOut bytes.Buffer
			if code := cmd(h, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "usage: agentd "+name) || errOut.Len() > 0 {
				t.Errorf("agentd %s %s: exit %d, stdout %q, stderr %q; want 0 and the usage on stdout", name, strings.Join(h, " "), code, out.String(), errOut.String())
			}
		}
		var out, errOut bytes.Buffer
		if code := cmd([]string{"--bogus"}, &out, &errOut); code != 2 || out.Len() > 0 || !strings.Contains(errOut.String(), "usage: agentd "+name) {
			t.Errorf("agentd %s --bogus: exit %d, stdout %q, stderr %q; want 2 and the usage on stderr", name, code, out.String(), errOut.String())
		}
	}
	if code := captureStdout(t, func() int { return run(context.Background(), []string{"--help"}) }); code != 0 {
		t.Errorf("agentd --help: exit %d, want 0", code)
	}
}

// captureStdout runs f with os.Stdout sent to a pipe it drains, and
// returns f's result.
func captureStdout(t *testing.T, f func() int) int {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() { b, _ := io.ReadAll(r); done <- string(b) }()
	code := f()
	os.Stdout = old
	w.Close()
	// The commands too: a customer's admin finds agentd breakglass here.
	if out := <-done; !strings.Contains(out, "-state-dir") || !strings.Contains(out, "\n  breakglass ") || !strings.Contains(out, "\n  permissions ") {
		t.Errorf("stdout %q, want the commands and the flags", out)
	}
	return code
}
