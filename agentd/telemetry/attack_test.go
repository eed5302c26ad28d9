package telemetry

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/byoc-dev/byoc/agentd/permissions"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// A log line the agent forwards is always valid UTF-8, whatever the file
// holds: a line of binary bytes, and a long line of multi-byte text cut
// at MaxLineBytes in the middle of a character, marshal (a proto3
// string must be UTF-8; one that is not failed the batch's Send, and the
// agent's whole stream with it, on every such line an app logged).
func TestCollectorLinesAreUTF8(t *testing.T) {
	dir := t.TempDir()
	logFile := filepath.Join(dir, "app.log")
	long := "x" + strings.Repeat("é", MaxLineBytes) // 'x' then 2-byte runes: the cut falls inside one
	if err := os.WriteFile(logFile, []byte("bad \xff\xfe bytes secret=hunter2\n"+long+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1800000000, 0)
	setting := permissions.TelemetrySetting{Mode: "metrics,logs", RedactFields: []string{"secret"}}
	c := &Collector{Setting: func() (permissions.TelemetrySetting, error) { return setting, nil }, Now: func() time.Time { return now }}
	c.SetConfig(&agentv1.TelemetryConfig{Logs: []*agentv1.LogSource{{Name: "app", Path: logFile, IntervalMs: 1000}}})
	c.Collect(context.Background())
	var b *agentv1.TelemetryBatch
	select {
	case b = <-c.Batches():
	default:
		t.Fatal("no batch")
	}
	if len(b.Lines) != 2 {
		t.Fatalf("%d lines, want 2", len(b.Lines))
	}
	for i, l := range b.Lines {
		if !utf8.ValidString(l.Text) {
			t.Errorf("line %d is not valid UTF-8: %q", i, l.Text[:min(len(l.Text), 40)])
		}
	}
	if got := b.Lines[0].Text; got != "bad \uFFFD bytes secret=[redacted]" {
		t.Errorf("binary line: %q", got)
	}
	if got := b.Lines[1].Text; len(got) > MaxLineBytes+len("…") || !strings.HasSuffix(got, "é…") {
		t.Errorf("cut line: %d bytes, ends %q", len(got), got[max(0, len(got)-8):])
	}
	if _, err := proto.Marshal(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Telemetry{Telemetry: b}}); err != nil {
		t.Fatalf("the batch cannot be sent: %v", err)
	}
}

// The forms a redacted field's value takes in the logs apps write are
// masked: in a URL's query (after & or ?), in brackets, after a dotted
// prefix, with spaces around = or :, in single quotes, and inside a
// JSON line's string values (a message that embeds NAME=VALUE), not
// only as a JSON key or a logfmt pair at a word's start.
func TestRedactLineForms(t *testing.T) {
	r := rules(t, permissions.TelemetrySetting{Mode: "metrics,logs", RedactFields: []string{"password", "token"}})
	for in, want := range map[string]string{
		`GET /login?user=bob&password=hunter2 200`:                `GET /login?user=bob&password=[redacted] 200`,
		`GET /cb?token=hunter2&x=1 200`:                           `GET /cb?token=[redacted] 200`,
		`[password=hunter2] done`:                                 `[password=[redacted] done`,
		`db.password=hunter2 ok`:                                  `db.password=[redacted] ok`,
		`password = hunter2 ok`:                                   `password = [redacted] ok`,
		`password='hunter2 two' ok`:                               `password=[redacted] ok`,
		`{"msg":"retry with password=hunter2","n":1}`:             `{"msg":"retry with password=[redacted]","n":1}`,
		`{"password" : "hunter2"`:                                 `{"password" : [redacted]`,
		`msg="{\"password\":\"hunter2\"}" ok`:                     `msg="{\"password\":[redacted]}" ok`,
		`mypassword=visible passwords=visible password_hint=seen`: `mypassword=visible passwords=visible password_hint=seen`,
	} {
		got := r.Line(in)
		if got != want {
			t.Errorf("%s\n got %s\nwant %s", in, got, want)
		}
		if strings.Contains(got, "hunter2") {
			t.Errorf("%s: the value leaves: %s", in, got)
		}
	}
}

// A scrape whose label value is not UTF-8 is refused as a whole (the
// parser validates), so no sample the agent forwards can fail the
// batch's Send.
func TestParseMetricsNotUTF8(t *testing.T) {
	r := rules(t, permissions.TelemetrySetting{Mode: "metrics"})
	ss, err := ParseMetrics("api", strings.NewReader("m{a=\"\xff\"} 1\n"), time.Unix(0, 0), r)
	if err == nil {
		for _, s := range ss {
			for k, v := range s.Labels {
				if !utf8.ValidString(k) || !utf8.ValidString(v) {
					t.Fatalf("label %q=%q forwarded", k, v)
				}
			}
		}
	}
}

// The vendor's declaration names the log files; the agent's own files
// are never read as logs, named directly, matched by a glob, or reached
// through a symbolic link in a log directory: the agent's identity (its
// private key, one JSON line), its customer's control files and its
// session recordings stay on the machine. An ordinary file beside them is
// read.
func TestCollectorNeverReadsTheAgentsFiles(t *testing.T) {
	state := t.TempDir()
	logs := t.TempDir()
	secrets := filepath.Join(t.TempDir(), "secrets.env")
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(state, "identity.json"), `{"agent_id":"agt_1","private_key":"PRIVATEKEY"}`+"\n")
	write(filepath.Join(state, "sessions", "ss_1.cast"), `[0.1,"o","SESSIONOUTPUT"]`+"\n")
	write(secrets, "DB_PASSWORD=SECRETVALUE\n")
	write(filepath.Join(logs, "app.log"), "ordinary line\n")
	for name, target := range map[string]string{"id.log": filepath.Join(state, "identity.json"), "sec.log": secrets, "st.log": state + "/sessions/ss_1.cast"} {
		if err := os.Symlink(target, filepath.Join(logs, name)); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Unix(1800000000, 0)
	setting := permissions.TelemetrySetting{Mode: "metrics,logs"}
	c := &Collector{Setting: func() (permissions.TelemetrySetting, error) { return setting, nil }, Now: func() time.Time { return now },
		Hidden: []string{state, secrets}}
	c.SetConfig(&agentv1.TelemetryConfig{Logs: []*agentv1.LogSource{
		{Name: "dir", Path: filepath.Join(logs, "*.log"), IntervalMs: 1000},
		{Name: "identity", Path: filepath.Join(state, "identity.json"), IntervalMs: 1000},
		{Name: "state", Path: filepath.Join(state, "*", "*"), IntervalMs: 1000},
		{Name: "secrets", Path: secrets, IntervalMs: 1000},
	}})
	c.Collect(context.Background())
	var got []string
	for {
		select {
		case b := <-c.Batches():
			for _, l := range b.Lines {
				got = append(got, l.Text)
			}
			continue
		default:
		}
		break
	}
	all := strings.Join(got, "\n")
	for _, secret := range []string{"PRIVATEKEY", "SESSIONOUTPUT", "SECRETVALUE"} {
		if strings.Contains(all, secret) {
			t.Errorf("the agent's own file was read as a log: %q", all)
		}
	}
	if len(got) != 1 || got[0] != "ordinary line" {
		t.Errorf("lines %q, want the ordinary one", got)
	}
}

// The name tail checked may lead elsewhere by the time the file is
// opened (a link in the app's log directory swapped between the two), and
// a hard link to the agent's key gives no path of the agent's away: what
// was opened is checked again, and the key's lines are never read.
func TestCollectorChecksWhatItOpened(t *testing.T) {
	state := t.TempDir()
	logs := t.TempDir() // the same filesystem as state
	key := filepath.Join(state, "identity.json")
	if err := os.WriteFile(key, []byte(`{"private_key":"PRIVATEKEY"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &Collector{Hidden: []string{state}}
	b := &batcher{c: c}
	t.Run("a link swapped after the name was checked", func(t *testing.T) {
		// tail's check of the name passed (it named an ordinary file);
		// the name now leads to the key.
		swapped := filepath.Join(logs, "swapped.log")
		if err := os.Symlink(key, swapped); err != nil {
			t.Fatal(err)
		}
		n, err := c.readLines("app", swapped, 0, 100, time.Now(), b)
		if err == nil || !strings.Contains(err.Error(), "the agent's own file") || n != 0 {
			t.Fatalf("readLines of a link to the agent's key: %d bytes, err %v; want it refused as the agent's own file", n, err)
		}
	})
	t.Run("a hard link to the key", func(t *testing.T) {
		hard := filepath.Join(logs, "hard.log")
		if err := os.Link(key, hard); err != nil {
			t.Skipf("no hard link here: %v", err)
		}
		c.SetConfig(&agentv1.TelemetryConfig{Logs: []*agentv1.LogSource{{Name: "dir", Path: filepath.Join(logs, "hard.log"), IntervalMs: 1000}}})
		c.Setting = func() (permissions.TelemetrySetting, error) {
			return permissions.TelemetrySetting{Mode: "metrics,logs"}, nil
		}
		c.Now = time.Now
		c.Collect(context.Background())
		for {
			select {
			case got := <-c.Batches():
				for _, l := range got.Lines {
					if strings.Contains(l.Text, "PRIVATEKEY") {
						t.Fatalf("a hard link to the agent's key was read as a log: %q", l.Text)
					}
				}
				continue
			default:
			}
			break
		}
	})
}
