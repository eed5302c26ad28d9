package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/ledger"
)

func TestEgressListAndStats(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	at := now.Add(-2 * time.Hour)
	l, err := ledger.Open(dir, ledger.Options{Install: "ins_1", Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	l.RecordBytes("heartbeat", "", []byte("abc"))
	at = now.Add(-time.Minute)
	l.RecordBytes("result", "job_1", []byte("12345"))
	l.RecordBytes("result", "job_2", []byte("1234567"))
	l.Close()
	run := func(want int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := egressCmd(args, &out, &errOut, func() time.Time { return now }); code != want {
			t.Fatalf("agentd egress %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, out.String(), errOut.String())
		}
		return out.String() + errOut.String()
	}
	out := run(0, "list", "--state-dir", dir)
	if !lineHas(out, "heartbeat", "3", "-", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") || !lineHas(out, "result", "5", "job_1") {
		t.Fatalf("list:\n%s", out)
	}
	out = run(0, "stats", "--state-dir", dir)
	if !lineHas(out, "heartbeat", "1", "3") || !lineHas(out, "result", "2", "12") || !lineHas(out, "total", "3", "15") {
		t.Fatalf("stats:\n%s", out)
	}
	out = run(0, "stats", "--state-dir", dir, "--since", "1h")
	if strings.Contains(out, "heartbeat") || !lineHas(out, "total", "2", "12") {
		t.Fatalf("stats --since 1h:\n%s", out)
	}
	out = run(0, "list", "--state-dir", dir, "--since", "2026-11-28T11:30:00Z", "--json")
	if strings.Count(out, "\n") != 2 || !strings.Contains(out, `"job":"job_2"`) {
		t.Fatalf("list --since TIME --json:\n%s", out)
	}
	if out := run(2, "list", "--state-dir", dir, "--since", "yesterday"); !strings.Contains(out, `--since "yesterday"`) {
		t.Fatalf("bad --since:\n%s", out)
	}
	if out := run(2, "show", "--state-dir", dir); !strings.Contains(out, "want list or stats") {
		t.Fatalf("bad word:\n%s", out)
	}
	if out := run(2, "list"); !strings.Contains(out, "--state-dir is required") {
		t.Fatalf("no state dir:\n%s", out)
	}
}

// A job's id in the ledger is imsd's (a compromised imsd signs any): an
// id carrying escape sequences, which the agent refused and reported
// under it, is shown, never obeyed, by agentd egress list.
func TestEgressListShowsNoEscape(t *testing.T) {
	dir := t.TempDir()
	l, err := ledger.Open(dir, ledger.Options{Install: "ins_1"})
	if err != nil {
		t.Fatal(err)
	}
	l.RecordBytes("result", "job_\x1b]52;c;cm0gLXJmIC8=\a\x1b[2K", []byte("12345"))
	l.Close()
	var out, errOut bytes.Buffer
	if code := egressCmd([]string{"list", "--state-dir", dir}, &out, &errOut, time.Now); code != 0 {
		t.Fatalf("agentd egress list: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	if strings.ContainsAny(out.String(), "\x1b\a") || !lineHas(out.String(), "result", "job_") {
		t.Fatalf("the job id reached the terminal as it was:\n%q", out.String())
	}
}
