package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/store"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// testRecording is a support session's recording as the agent writes it.
const testRecording = `{"version":2,"width":80,"height":24,"timestamp":1795000000,"title":"byoc support session SES by ops@example.com"}
[0.0,"o","$ "]
[0.05,"i","id\r"]
[0.1,"o","uid=1000(byoc)\r\n"]
`

// keepRecording stores a recording of session id of install in imsd's
// database, as agentapi does when the customer's agent sends one; a
// tampered one's stored SHA-256 is of other bytes.
func keepRecording(t *testing.T, ims *cluster.IMS, install, id string, tampered bool) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(ims.DataDir, "imsd.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	in, err := st.GetInstall(ctx, install)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte(strings.Replace(testRecording, "SES", id, 1))
	sum := sha256.Sum256(data)
	if tampered {
		sum = sha256.Sum256(append(data, 'x'))
	}
	if err := st.SaveSessionRecording(ctx, store.SessionRecording{SessionID: id, InstallID: in.ID, AgentID: "agent_x",
		SHA256: hex.EncodeToString(sum[:]), Data: data, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

// The recordings imsd keeps of an install's support sessions (sent by
// an agent run with --session-recordings-to-vendor) are listed with
// byoc support recordings and replayed with byoc support play, after
// their SHA-256 is checked: a tampered one is refused, naming it. A
// viewer may read neither.
func TestSupportRecordingsListAndPlay(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	keepRecording(t, ims, "acme", "ses_good", false)
	keepRecording(t, ims, "acme", "ses_bad", true)

	out := cli.Run(0, "support", "recordings", "acme")
	for _, want := range []string{"ID", "OPERATOR", "SHA-256", "ses_good", "ses_bad", "ops@example.com", "2026-11-18T"} {
		if !strings.Contains(out, want) {
			t.Fatalf("support recordings lacks %q:\n%s", want, out)
		}
	}
	if out := cli.Run(0, "support", "play", "ses_good", "--raw"); out != "$ uid=1000(byoc)\r\n" {
		t.Fatalf("support play --raw: %q", out)
	}
	if out := cli.Run(0, "support", "play", "ses_good", "--speed", "1000"); out != "$ uid=1000(byoc)\r\n" {
		t.Fatalf("support play --speed 1000: %q", out)
	}
	o, e, code := cli.Exec("support", "play", "ses_bad", "--raw")
	if code == 0 || o != "" || !strings.Contains(e, "ses_bad") || !strings.Contains(e, "tampered") {
		t.Fatalf("tampered recording: exit %d\n%s%s", code, o, e)
	}
	if _, e, code := cli.Exec("support", "play", "ses_none"); code == 0 || !strings.Contains(e, "ses_none") {
		t.Fatalf("unknown recording: exit %d\n%s", code, e)
	}

	tok, err := ims.Admin().CreateApiToken(context.Background(), connect.NewRequest(&imsv1.CreateApiTokenRequest{Name: "v", Role: imsv1.Role_ROLE_VIEWER}))
	if err != nil {
		t.Fatal(err)
	}
	viewer := cluster.NewCLIWith(t, filepath.Join(t.TempDir(), "config"), ims.URL(), tok.Msg.Token)
	for _, args := range [][]string{{"support", "recordings", "acme"}, {"support", "play", "ses_good", "--raw"}} {
		o, e, code := viewer.Exec(args...)
		if code == 0 || o != "" || !strings.Contains(e, "viewer") || !strings.Contains(e, "break-glass") {
			t.Fatalf("viewer %v: exit %d\n%s%s", args, code, o, e)
		}
	}

	// Every read is in the install's audit chain, with who read which
	// bytes: the two plays of ses_good, the refused play of the tampered
	// one (its bytes were sent); the viewer's denied read is not a read.
	good := sha256.Sum256([]byte(strings.Replace(testRecording, "SES", "ses_good", 1)))
	reads := sessionAudit(t, ims.Admin(), "ses_good", "support.session.recording_read", hex.EncodeToString(good[:]))
	if len(reads) != 2 {
		t.Fatalf("%d audited reads of ses_good, want 2 (the two plays)", len(reads))
	}
	for _, ev := range reads {
		if ev.Actor == "" || strings.HasSuffix(ev.Actor, ":") {
			t.Fatalf("read audited with actor %q", ev.Actor)
		}
	}
	var bad []*imsv1.AuditEvent
	r, err := ims.Admin().ListAuditEvents(context.Background(), connect.NewRequest(&imsv1.ListAuditEventsRequest{Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range r.Msg.Events {
		if ev.Kind == "support.session.recording_read" && ev.Subject == "ses_bad" {
			bad = append(bad, ev)
		}
	}
	if len(bad) != 1 {
		t.Fatalf("%d audited reads of the tampered ses_bad, want 1", len(bad))
	}
	cli.Run(0, "audit", "verify", "--install", "acme")
}

// byoc support recordings lists the SHA-256 that byoc support play checks
// (the audit chain's record of keeping the recording), not the kept row's
// own column, and says which recordings play would refuse: a recording
// whose bytes and column were altered together lists the hash imsd kept,
// marked tampered, and play refuses it.
func TestSupportRecordingsListTheHashPlayChecks(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	keepRecording(t, ims, "acme", "ses_good", false)
	keepRecording(t, ims, "acme", "ses_alt", false)
	hash := func(id string) string {
		sum := sha256.Sum256([]byte(strings.Replace(testRecording, "SES", id, 1)))
		return hex.EncodeToString(sum[:])
	}
	// Alter ses_alt's bytes and its row's SHA-256 column in one write.
	altered := []byte(strings.Replace(strings.Replace(testRecording, "SES", "ses_alt", 1), "uid=1000", "uid=0", 1))
	sum := sha256.Sum256(altered)
	alteredHash := hex.EncodeToString(sum[:])
	st, err := store.Open(context.Background(), filepath.Join(ims.DataDir, "imsd.db"))
	if err != nil {
		t.Fatal(err)
	}
	must(t, st.RawExec(context.Background(), `UPDATE support_session_recordings SET data = ?, sha256 = ? WHERE session_id = ?`, altered, alteredHash, "ses_alt"))
	st.Close()

	out := cli.Run(0, "support", "recordings", "acme")
	row := func(id string) []string {
		t.Helper()
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == id {
				return f
			}
		}
		t.Fatalf("no row for %s:\n%s", id, out)
		return nil
	}
	if !strings.Contains(out, "CHECK") {
		t.Fatalf("support recordings has no CHECK column:\n%s", out)
	}
	if f := row("ses_good"); f[len(f)-2] != hash("ses_good") || f[len(f)-1] != "ok" {
		t.Fatalf("ses_good: %v, want SHA-256 %s and ok:\n%s", f, hash("ses_good"), out)
	}
	if f := row("ses_alt"); f[len(f)-2] != hash("ses_alt") || f[len(f)-1] != "tampered" {
		t.Fatalf("ses_alt: %v, want the kept SHA-256 %s (not the altered row's %s) and tampered:\n%s", f, hash("ses_alt"), alteredHash, out)
	}
	if o, e, code := cli.Exec("support", "play", "ses_alt", "--raw"); code == 0 || o != "" || !strings.Contains(e, "tampered") || !strings.Contains(e, hash("ses_alt")) {
		t.Fatalf("play ses_alt: exit %d\n%s%s", code, o, e)
	}
	cli.Run(0, "support", "play", "ses_good", "--raw")

	var list []struct {
		SessionID string `json:"sessionId"`
		Sha256    string `json:"sha256"`
		Tampered  bool   `json:"tampered"`
	}
	js := cli.Run(0, "support", "recordings", "acme", "-o", "json")
	if err := json.Unmarshal([]byte(js), &list); err != nil {
		t.Fatalf("%v: %s", err, js)
	}
	for _, r := range list {
		if r.Sha256 != hash(r.SessionID) || r.Tampered != (r.SessionID == "ses_alt") {
			t.Fatalf("-o json: %+v\n%s", r, js)
		}
	}
}
