package sessionrec_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/byoc-dev/byoc/agentd/sessionrec"
)

// A recording is asciicast v2: a header of version 2 with the width,
// height and timestamp, then [time, code, data] events whose times never
// go back (an event stamped before the last is recorded at its time);
// Close returns the file's SHA-256 and size.
func TestRecordingIsAsciicastV2(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 11, 28, 5, 0, 0, 0, time.UTC)
	w, err := sessionrec.Create(dir, "ss_test0001", sessionrec.Header{Width: 80, Height: 24, Env: map[string]string{"TERM": "xterm"}}, start)
	if err != nil {
		t.Fatal(err)
	}
	w.Event(start.Add(500*time.Millisecond), "o", "$ ")
	w.Event(start.Add(time.Second), "i", "ls\r")
	w.Event(start.Add(900*time.Millisecond), "o", "a \"quoted\" \x1b[0m line\r\n") // back in time: kept at 1s
	w.Event(start.Add(2*time.Second), "r", "100x40")
	sum, size, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(sessionrec.CastPath(dir, "ss_test0001"))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(b)
	if sum != hex.EncodeToString(h[:]) || size != int64(len(b)) {
		t.Fatalf("Close: %s %d, file %x %d", sum, size, h, len(b))
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	var hdr map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &hdr); err != nil {
		t.Fatal(err)
	}
	if hdr["version"] != 2.0 || hdr["width"] != 80.0 || hdr["height"] != 24.0 || hdr["timestamp"] != float64(start.Unix()) {
		t.Fatalf("header: %s", lines[0])
	}
	if len(lines) != 5 {
		t.Fatalf("want a header and 4 events:\n%s", b)
	}
	last := -1.0
	for _, l := range lines[1:] {
		var ev []any
		if err := json.Unmarshal([]byte(l), &ev); err != nil || len(ev) != 3 {
			t.Fatalf("event %s: %v", l, err)
		}
		tm := ev[0].(float64)
		if tm < last {
			t.Fatalf("time goes back at %s", l)
		}
		last = tm
	}
	hd, evs, err := sessionrec.Read(bytes.NewReader(b))
	if err != nil || hd.Width != 80 || len(evs) != 4 {
		t.Fatalf("Read: %+v %v %v", hd, evs, err)
	}
	if evs[2].Time != 1 || evs[2].Data != "a \"quoted\" \x1b[0m line\r\n" || evs[3].Code != "r" {
		t.Fatalf("events: %+v", evs)
	}
	if err := w.Event(start, "o", "late"); err == nil {
		t.Fatal("an event after Close was accepted")
	}
	// The file is new: a second recording of the same id is refused.
	if _, err := sessionrec.Create(dir, "ss_test0001", sessionrec.Header{Width: 1, Height: 1}, start); err == nil {
		t.Fatal("Create over an existing recording succeeded")
	}
}

// Read refuses what is not asciicast v2, naming the line.
func TestReadRefusesInvalid(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{``, "no header"},
		{`{"version":1,"width":80,"height":24,"timestamp":1}`, "line 1: header: want version 2"},
		{`{"version":2,"width":0,"height":24,"timestamp":1}`, "line 1"},
		{`{"version":2,"width":80,"height":24}`, "line 1"},
		{"{\"version\":2,\"width\":80,\"height\":24,\"timestamp\":1}\n[1.0, \"o\"]", "line 2: an event is [time, code, data]"},
		{"{\"version\":2,\"width\":80,\"height\":24,\"timestamp\":1}\n[1.0, \"x\", \"a\"]", "line 2: code \"x\""},
		{"{\"version\":2,\"width\":80,\"height\":24,\"timestamp\":1}\n[2.0, \"o\", \"a\"]\n[1.0, \"o\", \"b\"]", "line 3: time"},
	} {
		if _, _, err := sessionrec.Read(strings.NewReader(tt.in)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Read(%q): %v, want %q", tt.in, err, tt.want)
		}
	}
}

// Text keeps a UTF-8 sequence split across reads whole (carried to the
// next), and turns invalid bytes into U+FFFD, so that every event is
// valid UTF-8 and the chunks together are the text.
func TestTextCarriesSplitRunes(t *testing.T) {
	in := []byte("héllo → wörld\n")
	var got strings.Builder
	var carry []byte
	for i := range in { // one byte at a time: every split
		s, c := sessionrec.Text(carry, in[i:i+1])
		if !utf8.ValidString(s) {
			t.Fatalf("chunk %q is not valid UTF-8", s)
		}
		got.WriteString(s)
		carry = c
	}
	if got.String() != string(in) || len(carry) != 0 {
		t.Fatalf("got %q carry %q", got.String(), carry)
	}
	s, c := sessionrec.Text(nil, []byte("a\xffb\xe2\x86"))
	if s != "a\uFFFDb" || string(c) != "\xe2\x86" {
		t.Fatalf("invalid byte and a split rune: %q %q", s, c)
	}
}

// The summaries: written atomically, listed oldest first.
func TestMetaList(t *testing.T) {
	dir := t.TempDir()
	now := time.Now().UTC()
	for i, id := range []string{"ss_bbbbbbbb", "ss_aaaaaaaa"} {
		if err := sessionrec.WriteMeta(dir, sessionrec.Meta{ID: id, Operator: "token:sup", Started: now.Add(time.Duration(i) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := sessionrec.List(dir)
	if err != nil || len(ms) != 2 || ms[0].ID != "ss_bbbbbbbb" {
		t.Fatalf("List: %+v %v", ms, err)
	}
	if ms, err := sessionrec.List(dir + "/none"); err != nil || ms != nil {
		t.Fatalf("List of no directory: %v %v", ms, err)
	}
}
