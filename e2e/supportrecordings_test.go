package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
