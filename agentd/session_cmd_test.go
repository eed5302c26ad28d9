package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/agentd/sessionrec"
	"github.com/byoc-dev/byoc/internal/auditchain"
)

// writeSession records a finished session in state dir dir.
func writeSession(t *testing.T, dir, id string, out ...string) {
	t.Helper()
	writeSessionBy(t, dir, id, "token:sup", out...)
}

// writeSessionBy records a finished session of operator in state dir dir.
func writeSessionBy(t *testing.T, dir, id, operator string, out ...string) {
	t.Helper()
	sdir := sessionrec.Dir(dir)
	start := time.Now().Add(-time.Minute)
	w, err := sessionrec.Create(sdir, id, sessionrec.Header{Width: 80, Height: 24}, start)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range out {
		w.Event(start.Add(time.Duration(i)*time.Millisecond), "o", o)
		w.Event(start.Add(time.Duration(i)*time.Millisecond), "i", "x")
	}
	sum, size, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := sessionrec.WriteMeta(sdir, sessionrec.Meta{ID: id, Operator: operator, Grant: "bg_1", Started: start,
		Ended: start.Add(time.Second), Reason: "ended: the command exited", SHA256: sum, Size: size, OutputBytes: 12}); err != nil {
		t.Fatal(err)
	}
}

// The operator's name imsd sent is shown by agentd session list, never
// obeyed: a name with escape sequences (kept by an agent before the
// agent refused such names) cannot write to the customer's terminal or
// add a line.
func TestSessionListShowsOperatorAsText(t *testing.T) {
	dir := t.TempDir()
	writeSessionBy(t, dir, "ss_bbbbbbbb", "token:sup\x1b]0;owned\x07\nss_forged  admin", "$ ")
	var o, e bytes.Buffer
	if code := sessionCmd(context.Background(), []string{"--state-dir", dir, "list"}, &o, &e, time.Now); code != 0 {
		t.Fatalf("list: %d %s", code, e.String())
	}
	if strings.ContainsAny(o.String(), "\x1b\a") || strings.Count(o.String(), "\n") != 2 || !strings.Contains(o.String(), "token:sup") {
		t.Fatalf("list: %q", o.String())
	}
}

// agentd session list, play, watch and kill on a recorded session.
func TestSessionCommands(t *testing.T) {
	dir := t.TempDir()
	run := func(args ...string) (string, string, int) {
		var o, e bytes.Buffer
		code := sessionCmd(context.Background(), append([]string{"--state-dir", dir}, args...), &o, &e, time.Now)
		return o.String(), e.String(), code
	}
	if out, _, code := run("list"); code != 0 || !strings.Contains(out, "no support sessions") {
		t.Fatalf("list of none: %d %s", code, out)
	}
	writeSession(t, dir, "ss_aaaaaaaa", "$ ", "héllo\r\n", "\x1b[0mbye\r\n")
	out, _, code := run("list")
	if code != 0 || !strings.Contains(out, "ss_aaaaaaaa") || !strings.Contains(out, "token:sup") || !strings.Contains(out, "bg_1") || !strings.Contains(out, "the command exited") {
		t.Fatalf("list: %d\n%s", code, out)
	}
	if out, _, code := run("play", "--raw", "ss_aaaaaaaa"); code != 0 || out != "$ héllo\r\n\x1b[0mbye\r\n" {
		t.Fatalf("play --raw: %d %q", code, out)
	}
	if out, _, code := run("play", "--speed", "1000", "ss_aaaaaaaa"); code != 0 || out != "$ héllo\r\n\x1b[0mbye\r\n" {
		t.Fatalf("play --speed 1000: %d %q", code, out)
	}
	// watch of an ended session writes its output and the end, then stops.
	if out, _, code := run("watch", "ss_aaaaaaaa"); code != 0 || !strings.HasPrefix(out, "$ héllo\r\n\x1b[0mbye\r\n") || !strings.Contains(out, "the command exited") {
		t.Fatalf("watch: %d %q", code, out)
	}
	if _, errOut, code := run("kill", "ss_aaaaaaaa"); code != 1 || !strings.Contains(errOut, "already ended") {
		t.Fatalf("kill of an ended session: %d %s", code, errOut)
	}
	for _, bad := range [][]string{{"play", "ss_nothere1"}, {"play", "../x"}, {"play", "--speed", "0", "ss_aaaaaaaa"}, {"watch"}, {"nope"}} {
		if _, errOut, code := run(bad...); code == 0 || errOut == "" {
			t.Errorf("%v: exit %d, %q", bad, code, errOut)
		}
	}
}

// A recording altered on disk after its session ended (a stolen disk, a
// root process) is not replayed by agentd session play: the SHA-256 the
// agent put in its journal's session.ended record is checked first,
// even when the summary was rewritten to match; an unaltered one plays.
func TestSessionPlayRefusesAlteredRecording(t *testing.T) {
	dir := t.TempDir()
	writeSession(t, dir, "ss_cccccccc", "$ ", "id\r\n")
	sdir := sessionrec.Dir(dir)
	m, err := sessionrec.ReadMeta(sdir, "ss_cccccccc")
	if err != nil {
		t.Fatal(err)
	}
	j, err := auditlog.Open(filepath.Join(auditlog.Dir(dir), auditlog.AgentFile), auditlog.AgentChain("agt_1"))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := auditlog.EncodeData(map[string]string{"recording_sha256": m.SHA256})
	if _, err := j.Add(auditchain.Record{At: time.Now().UnixNano(), Kind: "session.ended", Actor: "agent", Subject: "session:ss_cccccccc", Data: data}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	run := func(args ...string) (string, string, int) {
		var o, e bytes.Buffer
		code := sessionCmd(context.Background(), append([]string{"--state-dir", dir}, args...), &o, &e, time.Now)
		return o.String(), e.String(), code
	}
	if out, e, code := run("play", "--raw", "ss_cccccccc"); code != 0 || out != "$ id\r\n" {
		t.Fatalf("unaltered: %d %q %s", code, out, e)
	}
	cast := sessionrec.CastPath(sdir, "ss_cccccccc")
	b, err := os.ReadFile(cast)
	if err != nil {
		t.Fatal(err)
	}
	forged := bytes.Replace(b, []byte(`"id\r\n"`), []byte(`"ls\r\n"`), 1)
	if bytes.Equal(forged, b) {
		t.Fatal("the test's recording has no id line")
	}
	if err := os.WriteFile(cast, forged, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(forged)
	m.SHA256 = hex.EncodeToString(sum[:])
	if err := sessionrec.WriteMeta(sdir, m); err != nil {
		t.Fatal(err)
	}
	out, e, code := run("play", "--raw", "ss_cccccccc")
	if code == 0 || out != "" || !strings.Contains(e, "altered") || !strings.Contains(e, "journal") {
		t.Fatalf("altered: %d %q %s", code, out, e)
	}
}

// The operator's output replayed on the customer's terminal (watch, play)
// draws as it did, but carries none of the control strings that reach
// past the screen: an OSC 52 that would put a command on the customer's
// clipboard, a title. play --raw still writes the bytes exactly.
func TestSessionReplayDropsControlStrings(t *testing.T) {
	dir := t.TempDir()
	writeSession(t, dir, "ss_dddddddd", "$ ", "ls\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07\r\n", "\x1b]0;owned\x1b\\\x1b[32mok\x1b[0m\r\n")
	run := func(args ...string) string {
		var o, e bytes.Buffer
		if code := sessionCmd(context.Background(), append([]string{"--state-dir", dir}, args...), &o, &e, time.Now); code != 0 {
			t.Fatalf("%v: %d %s", args, code, e.String())
		}
		return o.String()
	}
	want := "$ ls\r\n\x1b[32mok\x1b[0m\r\n"
	if out := run("play", "--speed", "1000", "ss_dddddddd"); out != want {
		t.Errorf("play: %q, want %q", out, want)
	}
	if out := run("watch", "ss_dddddddd"); !strings.HasPrefix(out, want) {
		t.Errorf("watch: %q, want it to begin %q", out, want)
	}
	if out := run("play", "--raw", "ss_dddddddd"); !strings.Contains(out, "\x1b]52;c;") {
		t.Errorf("play --raw: %q, want the bytes exactly", out)
	}
}
