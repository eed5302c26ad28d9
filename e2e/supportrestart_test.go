package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/agentd/sessionrec"
	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// sessionEnds returns the data of imsd's support.session.ended records
// of session id in install's chain.
func sessionEnds(t *testing.T, c imsv1connect.OperatorServiceClient, install, id string) []map[string]string {
	t.Helper()
	r, err := c.ListAuditEvents(context.Background(), connect.NewRequest(&imsv1.ListAuditEventsRequest{Install: install}))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for _, ev := range r.Msg.Events {
		if ev.Subject != id || ev.Kind != "support.session.ended" {
			continue
		}
		var d map[string]string
		if err := json.Unmarshal([]byte(ev.Data), &d); err != nil {
			t.Fatalf("data of %s: %v: %s", ev.Kind, err, ev.Data)
		}
		out = append(out, d)
	}
	return out
}

// imsd killed (SIGKILL) mid-session, so that no call is left to audit
// the session's end: the agent ends the session when its stream breaks
// and, once imsd is back, reports the end, which imsd audits once with
// the recording's SHA-256 the customer's record holds. Then both imsd
// and the agent killed mid-session: the restarted agent ends it in the
// customer's record and reports that end too.
func TestSupportSessionEndAuditedAcrossAnIMSDKill(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMSProcess(t, nil, "--lease", "1500ms", "--heartbeat", "200ms")
	c := ims.Client()
	cli := cluster.NewCLIWith(t, filepath.Join(t.TempDir(), "byoc.json"), ims.URL(), ims.Token)
	pushed := cli.PushApp(breakGlassGrantApp)
	acme := cluster.StartAgent(t, ims.URL(), pushed.EnrollToken(t), filepath.Join(t.TempDir(), "acme"))
	connected := func() {
		cluster.Eventually(t, 30*time.Second, "acme's agent to connect", func() bool {
			r, err := c.GetInstall(context.Background(), connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: "acme"}))
			return err == nil && r.Msg.Install.Agent != nil && r.Msg.Install.Agent.Connected
		})
	}
	connected()
	permissions(t, acme.StateDir, "enable", "break_glass")
	grant := requestGrant(t, cli, "acme", "--reason", "INC-12", "--for", "1h")
	if out, code := breakglass(t, acme.StateDir, "approve", grant, "--role", "debugger", "--for", "1h", "--allow-sessions"); code != 0 {
		t.Fatalf("approve --allow-sessions: %d %s", code, out)
	}
	dir := sessionrec.Dir(acme.StateDir)

	// imsd killed: the agent's stream breaks, the agent ends the session.
	s, err := openShell(t, c, "acme")
	if err != nil {
		t.Fatal(err)
	}
	n := s.command(0, "echo up-$((40+2))")
	s.waitOutput(n, regexp.MustCompile(`up-42\r\n`), 10*time.Second)
	ims.Kill()
	var m sessionrec.Meta
	cluster.Eventually(t, 10*time.Second, "the agent to end the session whose stream broke", func() bool {
		m, err = sessionrec.ReadMeta(dir, s.id)
		return err == nil && !m.Ended.IsZero()
	})
	ims.Start()
	connected()
	var ends []map[string]string
	cluster.Eventually(t, 20*time.Second, "imsd's audit of the end the agent reported", func() bool {
		ends = sessionEnds(t, c, "acme", s.id)
		return len(ends) > 0
	})
	e := ends[0]
	if e["recording_sha256"] != m.SHA256 || m.SHA256 == "" || !strings.Contains(e["reason"], "stream to imsd broke") ||
		!strings.Contains(e["reported_late"], "imsd restarted") || e["agent"] == "" {
		t.Fatalf("imsd's support.session.ended: %v; the customer's record: %+v", e, m)
	}

	// Ended while imsd was down, then the agent killed before it could
	// report it: the restarted agent reports it from its record.
	s2, err := openShell(t, c, "acme")
	if err != nil {
		t.Fatal(err)
	}
	n = s2.command(0, "echo two-$((40+2))")
	s2.waitOutput(n, regexp.MustCompile(`two-42\r\n`), 10*time.Second)
	ims.Kill()
	cluster.Eventually(t, 10*time.Second, "the agent to end the session whose stream broke", func() bool {
		m, err = sessionrec.ReadMeta(dir, s2.id)
		return err == nil && !m.Ended.IsZero()
	})
	acme.Kill()
	if m, _ = sessionrec.ReadMeta(dir, s2.id); m.Reported {
		t.Fatalf("session %s reported with no imsd to report to: %+v", s2.id, m)
	}
	ims.Start()
	acme = cluster.StartAgent(t, ims.URL(), "", acme.StateDir)
	connected()
	waitEnd := func(id string) map[string]string {
		t.Helper()
		cluster.Eventually(t, 20*time.Second, "imsd's audit of the end the restarted agent reported", func() bool {
			ends = sessionEnds(t, c, "acme", id)
			return len(ends) > 0
		})
		m, err = sessionrec.ReadMeta(dir, id)
		if err != nil {
			t.Fatal(err)
		}
		if ends[0]["recording_sha256"] != m.SHA256 || m.SHA256 == "" {
			t.Fatalf("imsd's support.session.ended: %v; the customer's record: %+v", ends[0], m)
		}
		return ends[0]
	}
	if e := waitEnd(s2.id); !strings.Contains(e["reason"], "stream to imsd broke") {
		t.Fatalf("imsd's support.session.ended: %v", e)
	}

	// imsd frozen, then the agent killed mid-session, then imsd killed:
	// no one ended the session; the restarted agent ends it in the
	// customer's record and reports that end.
	s3, err := openShell(t, c, "acme")
	if err != nil {
		t.Fatal(err)
	}
	n = s3.command(0, "echo three-$((40+2))")
	s3.waitOutput(n, regexp.MustCompile(`three-42\r\n`), 10*time.Second)
	if err := syscall.Kill(ims.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	acme.Kill()
	ims.Kill()
	ims.Start()
	cluster.StartAgent(t, ims.URL(), "", acme.StateDir)
	if e := waitEnd(s3.id); !strings.Contains(e["reason"], "the agent (pid") {
		t.Fatalf("imsd's support.session.ended: %v", e)
	}

	// Once each, however often it is reported.
	time.Sleep(time.Second)
	for _, id := range []string{s.id, s2.id, s3.id} {
		if ends := sessionEnds(t, c, "acme", id); len(ends) != 1 {
			t.Fatalf("session %s: %d support.session.ended records: %v", id, len(ends), ends)
		}
	}
}
