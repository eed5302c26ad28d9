package e2e

import (
	"context"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/agentd/sessionrec"
	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/internal/syncbuf"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// startRecordedSessions starts imsd (a process, with args) and acme's
// agent with break-glass enabled and a grant allowing sessions, the
// agent run with agentArgs.
func startRecordedSessions(t *testing.T, out io.Writer, agentArgs []string, args ...string) (*cluster.IMSProcess, *cluster.CLI, *cluster.AgentProc, func()) {
	t.Helper()
	ims := cluster.StartIMSProcess(t, out, append([]string{"--lease", "1500ms", "--heartbeat", "200ms"}, args...)...)
	c := ims.Client()
	cli := cluster.NewCLIWith(t, filepath.Join(t.TempDir(), "byoc.json"), ims.URL(), ims.Token)
	pushed := cli.PushApp(breakGlassGrantApp)
	acme := cluster.StartAgent(t, ims.URL(), pushed.EnrollToken(t), filepath.Join(t.TempDir(), "acme"), agentArgs...)
	connected := func() {
		t.Helper()
		cluster.Eventually(t, 30*time.Second, "acme's agent to connect", func() bool {
			r, err := c.GetInstall(context.Background(), connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: "acme"}))
			return err == nil && r.Msg.Install.Agent != nil && r.Msg.Install.Agent.Connected
		})
	}
	connected()
	permissions(t, acme.StateDir, "enable", "break_glass")
	grant := requestGrant(t, cli, "acme", "--reason", "INC-77", "--for", "1h")
	if out, code := breakglass(t, acme.StateDir, "approve", grant, "--role", "debugger", "--for", "1h", "--allow-sessions"); code != 0 {
		t.Fatalf("approve --allow-sessions: %d %s", code, out)
	}
	return ims, cli, acme, connected
}

// runCommand opens a session on acme and runs echo WORD-$((40+2)) in it.
func runCommand(t *testing.T, c imsv1connect.OperatorServiceClient, word string) *shellClient {
	t.Helper()
	s, err := openShell(t, c, "acme")
	if err != nil {
		t.Fatal(err)
	}
	n := s.command(0, "echo "+word+"-$((40+2))")
	s.waitOutput(n, regexp.MustCompile(word+`-42\r\n`), 10*time.Second)
	return s
}

// waitMeta waits for the customer's summary of session id to satisfy ok.
func waitMeta(t *testing.T, stateDir, id, what string, ok func(sessionrec.Meta) bool) sessionrec.Meta {
	t.Helper()
	var m sessionrec.Meta
	cluster.Eventually(t, 30*time.Second, what, func() bool {
		var err error
		m, err = sessionrec.ReadMeta(sessionrec.Dir(stateDir), id)
		return err == nil && ok(m)
	})
	return m
}

func ended(m sessionrec.Meta) bool { return !m.Ended.IsZero() }
func kept(m sessionrec.Meta) bool  { return m.VendorKept }

// The copy of a recording the customer allowed reaches imsd once,
// whatever happens to the stream: imsd killed before the recording was
// sent (the session ended with the stream), imsd frozen then killed
// while it was being sent, and imsd and the agent both killed before
// it was. Each time the agent sends it again on its next stream, imsd
// keeps it once and confirms it, and byoc support play plays it. A
// session run while the customer did not allow copies is never sent,
// although the customer allowed them afterwards. The audit chain
// verifies.
func TestSupportRecordingReachesIMSDAcrossKills(t *testing.T) {
	skipShort(t)
	ims, cli, acme, connected := startRecordedSessions(t, nil, nil)
	c := ims.Client()
	dir := acme.StateDir

	// Not allowed when it ran: never sent, even once allowed.
	s0 := runCommand(t, c, "zero")
	s0.input("exit\n")
	s0.waitEnded(20 * time.Second)
	if m := waitMeta(t, dir, s0.id, "s0's end", ended); m.ToVendor {
		t.Fatalf("session %s run without --session-recordings-to-vendor recorded as allowed: %+v", s0.id, m)
	}
	acme.Stop()
	acme = cluster.StartAgent(t, ims.URL(), "", dir, "--session-recordings-to-vendor")
	connected()

	// imsd killed mid-session: the session ends with the stream, before
	// its recording could be sent.
	s1 := runCommand(t, c, "one")
	ims.Kill()
	waitMeta(t, dir, s1.id, "the agent to end s1 when its stream broke", ended)
	ims.Start()
	connected()
	waitMeta(t, dir, s1.id, "imsd to confirm keeping s1's recording", kept)

	// imsd frozen, the session killed by the customer: its end and its
	// recording go out to a stream no one reads; then imsd killed.
	s2 := runCommand(t, c, "two")
	if err := syscall.Kill(ims.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if out, code := agentdCmd(t, "session", "--state-dir", dir, "kill", s2.id); code != 0 {
		t.Fatalf("agentd session kill: %d %s", code, out)
	}
	waitMeta(t, dir, s2.id, "the agent to end s2", ended)
	ims.Kill()
	ims.Start()
	connected()
	waitMeta(t, dir, s2.id, "imsd to confirm keeping s2's recording", kept)

	// imsd killed mid-session, then the agent killed before imsd came
	// back: the restarted agent sends it.
	s3 := runCommand(t, c, "three")
	ims.Kill()
	waitMeta(t, dir, s3.id, "the agent to end s3 when its stream broke", ended)
	acme.Kill()
	ims.Start()
	acme = cluster.StartAgent(t, ims.URL(), "", dir, "--session-recordings-to-vendor")
	connected()
	waitMeta(t, dir, s3.id, "imsd to confirm keeping s3's recording", kept)

	// Once each, however often the agent and imsd restart.
	acme.Stop()
	ims.Kill()
	ims.Start()
	cluster.StartAgent(t, ims.URL(), "", dir, "--session-recordings-to-vendor")
	connected()
	list := cli.Run(0, "support", "recordings", "acme")
	if strings.Contains(list, s0.id) {
		t.Fatalf("the recording of %s, never allowed, reached imsd:\n%s", s0.id, list)
	}
	for _, s := range []struct {
		sess *shellClient
		word string
	}{{s1, "one-42"}, {s2, "two-42"}, {s3, "three-42"}} {
		id := s.sess.id
		m, err := sessionrec.ReadMeta(sessionrec.Dir(dir), id)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(list, id); n != 1 {
			t.Fatalf("%s listed %d times:\n%s", id, n, list)
		}
		if n := len(sessionAudit(t, c, id, "support.session.recording_kept", m.SHA256)); n != 1 {
			t.Fatalf("%s: %d support.session.recording_kept records with the customer's SHA-256 %s, want 1", id, n, m.SHA256)
		}
		if out := cli.Run(0, "support", "play", id, "--raw"); !strings.Contains(out, s.word) {
			t.Fatalf("support play %s --raw:\n%s", id, out)
		}
	}
	cli.Run(0, "audit", "verify", "--install", "acme")
}

// A session whose agent never comes back (imsd and the agent killed
// mid-session, imsd restarted alone) is ended by imsd once the agent
// has been gone for --support-session-lost-after, with a reason saying
// the agent was lost and when it was last heard; the agent's own report
// of the end, when it comes back, is logged, not written a second time.
func TestSupportSessionOfALostAgentEnded(t *testing.T) {
	skipShort(t)
	logs := &syncbuf.Buffer{}
	ims, cli, acme, connected := startRecordedSessions(t, logs, nil, "--support-session-lost-after", "3s")
	c := ims.Client()
	s := runCommand(t, c, "lost")
	if err := syscall.Kill(ims.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	acme.Kill()
	ims.Kill()
	ims.Start()
	var ends []map[string]string
	cluster.Eventually(t, 30*time.Second, "imsd to end the lost agent's session", func() bool {
		ends = sessionEnds(t, c, "acme", s.id)
		return len(ends) > 0
	})
	e := ends[0]
	at, err := time.Parse(time.RFC3339Nano, e["ended_at"])
	if err != nil || !strings.Contains(e["reason"], "the agent was lost") || e["lost_after"] != "3s" || at.After(time.Now()) {
		t.Fatalf("imsd's support.session.ended: %v (ended_at: %v)", e, err)
	}
	acme = cluster.StartAgent(t, ims.URL(), "", acme.StateDir)
	connected()
	waitMeta(t, acme.StateDir, s.id, "the agent to report the end", func(m sessionrec.Meta) bool { return m.Reported })
	cluster.Eventually(t, 20*time.Second, "imsd to log the agent's report of an end recorded already", func() bool {
		return strings.Contains(logs.String(), "reported by the agent after its end was recorded") && strings.Contains(logs.String(), s.id)
	})
	if ends := sessionEnds(t, c, "acme", s.id); len(ends) != 1 {
		t.Fatalf("%d support.session.ended records of %s: %v", len(ends), s.id, ends)
	}
	cli.Run(0, "audit", "verify", "--install", "acme")
}
