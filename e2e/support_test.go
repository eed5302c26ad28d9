package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	agentperm "github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/agentd/sessionrec"
	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// shellClient is an operator's end of a support session, as byoc
// support shell drives it, keeping every output byte it received.
type shellClient struct {
	t       *testing.T
	st      *connect.BidiStreamForClient[imsv1.SupportShellRequest, imsv1.SupportShellResponse]
	cancel  context.CancelFunc
	started *imsv1.SupportShellStarted
	id      string

	mu      sync.Mutex
	out     bytes.Buffer
	ended   *imsv1.SupportShellEnded
	endedAt time.Time
	err     error
	changed chan struct{}
}

// openShell opens a support session on install; it returns the error the
// opening ended with, if any.
func openShell(t *testing.T, c imsv1connect.OperatorServiceClient, install string, command ...string) (*shellClient, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st := c.SupportShell(ctx)
	if err := st.Send(&imsv1.SupportShellRequest{Install: install, Open: &imsv1.SupportShellOpen{Command: command,
		Size: &imsv1.TerminalSize{Rows: 24, Cols: 80}, Term: "xterm"}}); err != nil {
		cancel()
		return nil, err
	}
	first, err := st.Receive()
	if err != nil {
		cancel()
		return nil, err
	}
	if first.Started == nil {
		t.Fatalf("first message of a session is not its start: %v", first)
	}
	s := &shellClient{t: t, st: st, cancel: cancel, started: first.Started, id: first.SessionId, changed: make(chan struct{}, 1)}
	go func() {
		for {
			m, err := st.Receive()
			s.mu.Lock()
			if err != nil {
				s.err = err
			} else {
				s.out.Write(m.Output)
				if m.Ended != nil {
					s.ended, s.endedAt = m.Ended, time.Now()
				}
			}
			s.mu.Unlock()
			select {
			case s.changed <- struct{}{}:
			default:
			}
			if err != nil || m.Ended != nil {
				return
			}
		}
	}()
	return s, nil
}

func (s *shellClient) send(m *imsv1.SupportShellRequest) {
	s.t.Helper()
	if err := s.st.Send(m); err != nil {
		s.t.Fatalf("send to the session: %v", err)
	}
}

func (s *shellClient) input(text string) { s.send(&imsv1.SupportShellRequest{Input: []byte(text)}) }

// command waits for the shell's prompt after from, types line, and
// returns the output's length then.
func (s *shellClient) command(from int, line string) int {
	s.t.Helper()
	n := s.waitOutput(from, regexp.MustCompile(`\$ $`), 20*time.Second)
	s.input(line + "\n")
	return n
}

// waitOutput waits until the output after from matches re and returns
// where the match ends.
func (s *shellClient) waitOutput(from int, re *regexp.Regexp, timeout time.Duration) int {
	s.t.Helper()
	deadline := time.After(timeout)
	for {
		s.mu.Lock()
		out := s.out.Bytes()
		from = min(from, len(out))
		loc := re.FindIndex(out[from:])
		ended, err := s.ended, s.err
		s.mu.Unlock()
		if loc != nil {
			return from + loc[1]
		}
		if ended != nil || err != nil {
			s.t.Fatalf("session ended (%v, %v) before its output matched %s:\n%s", ended, err, re, s.tail())
		}
		select {
		case <-s.changed:
		case <-deadline:
			s.t.Fatalf("no output matching %s within %s:\n%s", re, timeout, s.tail())
		}
	}
}

func (s *shellClient) tail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.out.Bytes()
	return string(b[max(0, len(b)-2000):])
}

// waitEnded waits for the session's end.
func (s *shellClient) waitEnded(timeout time.Duration) (*imsv1.SupportShellEnded, time.Time) {
	s.t.Helper()
	deadline := time.After(timeout)
	for {
		s.mu.Lock()
		ended, at, err := s.ended, s.endedAt, s.err
		s.mu.Unlock()
		if ended != nil {
			return ended, at
		}
		if err != nil {
			s.t.Fatalf("session broke without an end: %v", err)
		}
		select {
		case <-s.changed:
		case <-deadline:
			s.t.Fatalf("session did not end within %s:\n%s", timeout, s.tail())
		}
	}
}

func agentdCmd(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("agentd %s: %v", strings.Join(args, " "), err)
	}
	if code != 0 {
		return stdout.String() + stderr.String(), code
	}
	return stdout.String(), code
}

// A support shell through real imsd and agentd: refused without a
// grant and under a grant that does not allow sessions; under one that
// does, a real PTY in the sandbox (tty names /dev/pts, stty size follows
// a resize, Ctrl-C interrupts, long output flows, nothing of the agent's
// environment), killed by the customer, ended by the grant's revocation
// within a second, recorded in asciicast v2 whose output is byte for byte
// what the operator received, and audited in imsd's chain with the
// recording's SHA-256.
func TestSupportShell(t *testing.T) {
	skipShort(t)
	ims, cli, acme, _ := startBreakGlass(t, fast)
	c := ims.Admin()
	ctx := context.Background()

	// No grant: refused, saying so.
	if _, err := openShell(t, c, "acme"); err == nil || !strings.Contains(err.Error(), "support sessions need a live break-glass grant") {
		t.Fatalf("session without a grant: %v", err)
	}
	// A grant that does not allow sessions: refused, naming the flag.
	plain := requestGrant(t, cli, "acme", "--reason", "INC-7 look around", "--for", "1h")
	if out, code := breakglass(t, acme.StateDir, "approve", plain, "--role", "debugger", "--for", "1h"); code != 0 {
		t.Fatalf("approve: %s", out)
	}
	if _, err := openShell(t, c, "acme"); err == nil || !strings.Contains(err.Error(), "--allow-sessions") {
		t.Fatalf("session under a grant without sessions: %v", err)
	}
	if out, code := breakglass(t, acme.StateDir, "revoke", plain); code != 0 {
		t.Fatalf("revoke: %s", out)
	}
	grant := requestGrant(t, cli, "acme", "--reason", "INC-8 pods crash", "--for", "1h")
	if out, code := breakglass(t, acme.StateDir, "approve", grant, "--role", "debugger", "--for", "1h", "--allow-sessions"); code != 0 || !strings.Contains(out, "support sessions allowed") {
		t.Fatalf("approve --allow-sessions: %d %s", code, out)
	}

	s, err := openShell(t, c, "acme")
	if err != nil {
		t.Fatalf("open a session under a grant with sessions: %v", err)
	}
	if s.started.GrantId != grant {
		t.Fatalf("session started under grant %q, want %s", s.started.GrantId, grant)
	}
	n := s.command(0, "tty")
	n = s.waitOutput(n, regexp.MustCompile(`/dev/pts/\d+\r\n`), 10*time.Second)
	n = s.command(n, "stty size")
	n = s.waitOutput(n, regexp.MustCompile(`(^|[^0-9])24 80\r\n`), 10*time.Second)
	s.send(&imsv1.SupportShellRequest{Resize: &imsv1.TerminalSize{Rows: 40, Cols: 100}})
	n = s.command(n, "stty size")
	n = s.waitOutput(n, regexp.MustCompile(`(^|[^0-9])40 100\r\n`), 10*time.Second)
	// Ctrl-C reaches the foreground command through the PTY's line
	// discipline, as with kubectl exec -it.
	n = s.command(n, "sh -c 'echo sleep-started; exec sleep 60'")
	n = s.waitOutput(n, regexp.MustCompile(`sleep-started\r\n`), 10*time.Second)
	s.input("\x03")
	s.input("echo after-$((20+22))\n")
	n = s.waitOutput(n, regexp.MustCompile(`after-42\r\n`), 10*time.Second)
	// Nothing of the agent's own environment, nor its state dir.
	if _, err := os.Stat(filepath.Join(acme.StateDir, "identity.json")); err != nil {
		t.Fatal(err)
	}
	n = s.command(n, "echo leak=${AWS_SECRET_ACCESS_KEY:-none} id=$(cat "+acme.StateDir+"/identity.json "+acme.StateDir+"/breakglass.json 2>/dev/null | wc -c)")
	n = s.waitOutput(n, regexp.MustCompile(`leak=none id=0\r\n`), 10*time.Second)
	// Long output flows through the bounded window.
	n = s.command(n, "seq 1 150000; echo seq-done")
	seqAt := time.Now()
	end := s.waitOutput(n, regexp.MustCompile(`\r\n150000\r\nseq-done\r\n`), 60*time.Second)
	t.Logf("seq 1 150000: %d bytes of output in %s", end-n, time.Since(seqAt).Round(time.Millisecond))

	// The customer sees it live.
	list, code := agentdCmd(t, "session", "--state-dir", acme.StateDir, "list")
	if code != 0 || !strings.Contains(list, s.id) || !strings.Contains(list, "running") || !strings.Contains(list, grant) {
		t.Fatalf("agentd session list: %d\n%s", code, list)
	}

	// The customer follows it live: agentd session watch until it ends.
	watch := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), "session", "--state-dir", acme.StateDir, "watch", s.id)
	var watched bytes.Buffer
	watch.Stdout, watch.Stderr = &watched, &watched
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	watchDone := make(chan error, 1)
	go func() { watchDone <- watch.Wait() }()
	t.Cleanup(func() { watch.Process.Kill() })

	// A second session, killed by the customer.
	k, err := openShell(t, c, "acme")
	if err != nil {
		t.Fatal(err)
	}
	k.waitOutput(0, regexp.MustCompile(`\$ $`), 20*time.Second)
	if out, code := agentdCmd(t, "session", "--state-dir", acme.StateDir, "kill", k.id); code != 0 || !strings.Contains(out, "killed "+k.id) {
		t.Fatalf("agentd session kill: %d %s", code, out)
	}
	if e, _ := k.waitEnded(5 * time.Second); !strings.Contains(e.Reason, "killed by the customer") {
		t.Fatalf("killed session's end: %v", e)
	}

	// A session opened with a support token ends when the vendor revokes
	// the token, though the customer's grant still allows sessions: the
	// operator is told why, the agent closes the shell.
	sup, err := c.CreateApiToken(ctx, connect.NewRequest(&imsv1.CreateApiTokenRequest{Name: "acme-support", Role: imsv1.Role_ROLE_SUPPORT, Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	v, err := openShell(t, ims.Client(sup.Msg.Token), "acme")
	if err != nil {
		t.Fatalf("open a session with a support token: %v", err)
	}
	v.waitOutput(0, regexp.MustCompile(`\$ $`), 20*time.Second)
	if _, err := c.RevokeApiToken(ctx, connect.NewRequest(&imsv1.RevokeApiTokenRequest{IdOrName: "acme-support"})); err != nil {
		t.Fatal(err)
	}
	if e, err := v.waitEnded(10 * time.Second); e == nil || !strings.Contains(e.Reason, "ended by imsd") || !strings.Contains(e.Reason, "revoked API token") {
		t.Fatalf("a session of a revoked token ended with %v (%v), want ended by imsd", e, err)
	}
	// Audited once the agent has closed the shell.
	cluster.Eventually(t, 10*time.Second, "support.session.ended of the revoked token's session "+v.id, func() bool {
		aud, err := c.ListAuditEvents(ctx, connect.NewRequest(&imsv1.ListAuditEventsRequest{Install: "acme"}))
		return err == nil && slices.ContainsFunc(aud.Msg.Events, func(ev *imsv1.AuditEvent) bool {
			return ev.Subject == v.id && ev.Kind == "support.session.ended"
		})
	})

	// Revocation ends the first within a second of the revocation.
	if out, code := breakglass(t, acme.StateDir, "revoke", grant, "--reason", "done"); code != 0 {
		t.Fatalf("revoke: %s", out)
	}
	gs, err := agentperm.LoadGrants(acme.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := gs.Find(grant)
	e, endedAt := s.waitEnded(10 * time.Second)
	took := endedAt.Sub(g.RevokedAt)
	t.Logf("revocation to the operator's end of the session: %s", took)
	if took > time.Second || !strings.Contains(e.Reason, "revoked") {
		t.Fatalf("session ended %s after its grant's revocation (want within 1s): %q", took, e.Reason)
	}

	select {
	case err := <-watchDone:
		if err != nil || !strings.Contains(watched.String(), "seq-done") || !strings.Contains(watched.String(), "was revoked by") {
			t.Fatalf("agentd session watch: %v\n%s", err, watched.String()[max(0, watched.Len()-500):])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agentd session watch did not end with the session")
	}

	// The recording: valid asciicast v2, its hash as reported, its output
	// byte for byte what the operator received.
	cast := sessionrec.CastPath(sessionrec.Dir(acme.StateDir), s.id)
	b, err := os.ReadFile(cast)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != e.RecordingSha256 || int64(len(b)) != e.RecordingBytes {
		t.Fatalf("recording %s: sha256 %x (%d bytes), session reported %s (%d)", cast, sum, len(b), e.RecordingSha256, e.RecordingBytes)
	}
	h, evs, err := sessionrec.Read(bytes.NewReader(b))
	if err != nil || h.Width != 80 || h.Height != 24 {
		t.Fatalf("recording is not valid asciicast v2: %v %+v", err, h)
	}
	var recorded bytes.Buffer
	var sawInput, sawResize bool
	for _, ev := range evs {
		switch ev.Code {
		case "o":
			recorded.WriteString(ev.Data)
		case "i":
			sawInput = sawInput || strings.Contains(ev.Data, "stty size")
		case "r":
			sawResize = sawResize || ev.Data == "100x40"
		}
	}
	s.mu.Lock()
	received := bytes.Clone(s.out.Bytes())
	s.mu.Unlock()
	if !bytes.Equal(recorded.Bytes(), received) {
		t.Fatalf("recorded output (%d bytes) differs from what the operator received (%d bytes)", recorded.Len(), len(received))
	}
	if !sawInput || !sawResize {
		t.Fatalf("recording lacks the input (%v) or the resize (%v)", sawInput, sawResize)
	}
	played, code := agentdCmd(t, "session", "--state-dir", acme.StateDir, "play", "--raw", s.id)
	if code != 0 || played != string(received) {
		t.Fatalf("agentd session play --raw: exit %d, %d bytes, want the %d the operator received", code, len(played), len(received))
	}

	// imsd's audit chain: the start and the end with the recording's hash.
	r, err := c.ListAuditEvents(ctx, connect.NewRequest(&imsv1.ListAuditEventsRequest{Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	var startedRec, endedRec bool
	for _, ev := range r.Msg.Events {
		if ev.Subject != s.id {
			continue
		}
		var d map[string]string
		json.Unmarshal([]byte(ev.Data), &d)
		switch ev.Kind {
		case "support.session.started":
			startedRec = d["grant"] == grant
		case "support.session.ended":
			endedRec = d["recording_sha256"] == e.RecordingSha256 && strings.Contains(d["reason"], "revoked")
		}
	}
	if !startedRec || !endedRec {
		t.Fatalf("imsd's audit of session %s: started %v, ended with the recording's hash %v", s.id, startedRec, endedRec)
	}
	// By default the vendor keeps no copy of the recording.
	for _, ev := range r.Msg.Events {
		if ev.Kind == "support.session.recording_kept" {
			t.Fatalf("imsd kept a recording the customer did not allow: %v", ev)
		}
	}
	list, _ = agentdCmd(t, "session", "--state-dir", acme.StateDir, "list")
	if !strings.Contains(list, "revoked") {
		t.Fatalf("agentd session list after the end:\n%s", list)
	}
}

// screenLine reports whether screen has a line that is exactly line.
func screenLine(screen, line string) bool {
	for _, l := range strings.Split(screen, "\n") {
		if strings.TrimRight(l, " ") == line {
			return true
		}
	}
	return false
}

// byoc support shell in a real terminal (tmux): raw mode, the grant's
// banner, tty and stty size in the shell, a resize of the window
// followed, Ctrl-C interrupting the foreground command, and exit ending
// the session with the customer's recording's hash.
func TestSupportShellTerminal(t *testing.T) {
	skipShort(t)
	ims, cli, acme, _ := startBreakGlass(t, fast)
	// This customer lets the vendor keep a copy of each recording.
	acme.Stop()
	acme = cluster.StartAgent(t, ims.URL(), "", acme.StateDir, "--session-recordings-to-vendor")
	waitConnected(t, ims, "acme")
	grant := requestGrant(t, cli, "acme", "--reason", "INC-9", "--for", "1h")
	if out, code := breakglass(t, acme.StateDir, "approve", grant, "--role", "debugger", "--for", "1h", "--allow-sessions"); code != 0 {
		t.Fatalf("approve: %s", out)
	}
	// Without a terminal: the command's output, and its exit code.
	if out, errOut, code := cli.Exec("support", "shell", "acme", "--", "sh", "-c", "echo piped-$((6*7)); exit 3"); code != 3 || !strings.Contains(out, "piped-42") {
		t.Fatalf("byoc support shell -- sh -c ...: exit %d\n%s%s", code, out, errOut)
	}
	term := cluster.StartTerminal(t, 100, 30, []string{"BYOC_CONFIG=" + filepath.Join(t.TempDir(), "config.json")},
		filepath.Join(cluster.Binaries(t), "byoc"), "--server", ims.URL(), "--token", ims.AdminToken, "support", "shell", "acme")
	term.WaitFor("the break-glass banner and the prompt", func(s string) bool {
		flat := strings.ReplaceAll(s, "\n", "")
		return strings.Contains(flat, "BREAK-GLASS support session") && strings.Contains(flat, "under grant "+grant) &&
			regexp.MustCompile(`[0-9]s left`).MatchString(flat) && screenLine(s, "$")
	})
	term.Type("tty; stty size")
	term.Keys("Enter")
	term.WaitFor("a /dev/pts terminal of 30x100", func(s string) bool {
		return regexp.MustCompile(`(?m)^/dev/pts/\d+ *$`).MatchString(s) && screenLine(s, "30 100")
	})
	term.Resize(120, 40)
	term.Type("clear; stty size")
	term.Keys("Enter")
	term.WaitFor("stty size after the resize", func(s string) bool { return screenLine(s, "40 120") })
	term.Type("sh -c 'echo sleep-started; exec sleep 60'")
	term.Keys("Enter")
	term.WaitFor("the foreground command", func(s string) bool { return screenLine(s, "sleep-started") })
	term.Keys("C-c")
	term.Type("echo after-$((20+22))")
	term.Keys("Enter")
	// (The prompt Ctrl-C brings may come before the typed-ahead command's
	// output, on its line.)
	term.WaitFor("the command after Ctrl-C", func(s string) bool { return regexp.MustCompile(`(?m)(^|\$ )after-42 *$`).MatchString(s) })
	term.Type("exit")
	term.Keys("Enter")
	s := strings.ReplaceAll(term.WaitText("[byoc] session ss_", "exited"), "\n", "")
	if !strings.Contains(s, "ended: the command exited") || !strings.Contains(s, "sha256 ") {
		t.Fatalf("the session's end:\n%s", s)
	}
	cluster.Eventually(t, 10*time.Second, "byoc to exit", term.Dead)
	id := regexp.MustCompile(`ss_[a-z0-9]+`).FindString(s)
	m, err := sessionrec.ReadMeta(sessionrec.Dir(acme.StateDir), id)
	if err != nil || !strings.Contains(s, m.SHA256) {
		t.Fatalf("the customer's summary of %s: %+v %v; screen:\n%s", id, m, err, s)
	}
	// imsd keeps the copy the customer allowed, with the same hash.
	cluster.Eventually(t, 10*time.Second, "imsd to keep the recording", func() bool {
		return len(sessionAudit(t, ims.Admin(), id, "support.session.recording_kept", m.SHA256)) == 1
	})
}

// sessionAudit returns the install acme's audit records of kind about
// session id whose recording_sha256 is sum.
func sessionAudit(t *testing.T, c imsv1connect.OperatorServiceClient, id, kind, sum string) []*imsv1.AuditEvent {
	t.Helper()
	r, err := c.ListAuditEvents(context.Background(), connect.NewRequest(&imsv1.ListAuditEventsRequest{Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	var out []*imsv1.AuditEvent
	for _, ev := range r.Msg.Events {
		var d map[string]string
		json.Unmarshal([]byte(ev.Data), &d)
		if ev.Subject == id && ev.Kind == kind && d["recording_sha256"] == sum {
			out = append(out, ev)
		}
	}
	return out
}

// The console's support shell in a real terminal (tmux): on an install
// with a live grant allowing sessions, e asks for the install's name,
// hands the terminal over (the break-glass banner with the time left,
// then the shell), and the console comes back when the shell exits,
// with the session's end and the recording's hash in its status line.
func TestConsoleSupportShell(t *testing.T) {
	skipShort(t)
	ims, cli, acme, _ := startBreakGlass(t, fast)
	grant := requestGrant(t, cli, "acme", "--reason", "INC-10", "--for", "1h")
	if out, code := breakglass(t, acme.StateDir, "approve", grant, "--role", "debugger", "--for", "1h", "--allow-sessions"); code != 0 {
		t.Fatalf("approve: %s", out)
	}
	term := cluster.StartTerminal(t, 200, 40, []string{"BYOC_CONFIG=" + filepath.Join(t.TempDir(), "config.json")},
		filepath.Join(cluster.Binaries(t), "byoc"), "--server", ims.URL(), "--token", ims.AdminToken)
	term.WaitFor("acme", func(s string) bool { return lineWith(s, "acme", "online") })
	term.Keys("Enter")
	// The install's view, with the grant's banner once polled.
	term.WaitText("installs › acme", "BREAK-GLASS on acme", "e shell")
	term.Keys("e")
	term.WaitText("Confirm: open a support shell on acme under break-glass", "UNDER BREAK-GLASS grant "+grant)
	term.Type("acme")
	term.Keys("Enter")
	term.WaitFor("the banner and the prompt", func(s string) bool {
		flat := strings.ReplaceAll(s, "\n", "")
		return strings.Contains(flat, "BREAK-GLASS support session") && regexp.MustCompile(`[0-9]s left`).MatchString(flat) && screenLine(s, "$")
	})
	term.Type("echo hello-from-$((6*7))-console")
	term.Keys("Enter")
	term.WaitFor("the command's output", func(s string) bool { return screenLine(s, "hello-from-42-console") })
	term.Type("exit")
	term.Keys("Enter")
	s := term.WaitText("installs › acme", "support session ss_", "ended: the command exited", "sha256 ")
	id := regexp.MustCompile(`ss_[a-z0-9]+`).FindString(s)
	m, err := sessionrec.ReadMeta(sessionrec.Dir(acme.StateDir), id)
	if err != nil || !strings.Contains(s, m.SHA256) {
		t.Fatalf("the customer's summary of %s: %+v %v; screen:\n%s", id, m, err, s)
	}
	// The console has its keys back.
	term.Keys("Escape")
	term.WaitFor("the fleet again", func(s string) bool { return lineWith(s, "acme", "online") && !strings.Contains(s, "installs › acme") })
}

// A session's own directory outlives the jobs that end while it runs
// (the sweep after each job leaves it), and a session whose agent is
// killed mid-session leaves nothing running (not even a process that left
// the shell's process group) and is ended in the customer's record when
// the agent starts again: its summary says how, and the journal holds
// the recording's SHA-256, which agentd session play then checks.
func TestSupportShellAcrossJobsAndAnAgentKill(t *testing.T) {
	skipShort(t)
	ims, cli, acme, _ := startBreakGlass(t, fast)
	c := ims.Admin()
	grant := requestGrant(t, cli, "acme", "--reason", "INC-10", "--for", "1h")
	if out, code := breakglass(t, acme.StateDir, "approve", grant, "--role", "debugger", "--for", "1h", "--allow-sessions"); code != 0 {
		t.Fatalf("approve --allow-sessions: %d %s", code, out)
	}
	s, err := openShell(t, c, "acme")
	if err != nil {
		t.Fatal(err)
	}
	n := s.command(0, `echo kept > "$HOME/kept" && echo wrote-$((40+2))`)
	n = s.waitOutput(n, regexp.MustCompile(`wrote-42\r\n`), 10*time.Second)
	job := enqueue(t, c, "acme", "echo done", 60)
	if j := cluster.WaitJob(t, c, job.Id, 30*time.Second, imsv1.JobState_JOB_STATE_SUCCEEDED, imsv1.JobState_JOB_STATE_FAILED); j.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("job: %v %q", j.State, j.Error)
	}
	n = s.command(n, `printf 'home-%s-%d\n' "$(cat "$HOME/kept" 2>&1)" $((40+2))`)
	n = s.waitOutput(n, regexp.MustCompile(`home-[^%\r\n]*-42\r\n`), 10*time.Second)
	if !strings.Contains(s.tail(), "home-kept-42\r\n") {
		t.Fatalf("the session's home after a job ended:\n%s", s.tail())
	}

	mark := marker()
	n = s.command(n, "(trap '' HUP TERM; setsid sleep "+mark+" > /dev/null 2>&1 &); echo bg-started")
	s.waitOutput(n, regexp.MustCompile(`bg-started\r\n`), 10*time.Second)
	ps := waitPIDs(t, mark, 1)
	acme.Kill()
	cluster.Eventually(t, 10*time.Second, "the session's processes to die with their agent", func() bool {
		for _, p := range ps {
			if alive(p) {
				return false
			}
		}
		return true
	})
	if e, _ := s.waitEnded(10 * time.Second); !strings.Contains(e.Reason, "stream to imsd ended") {
		t.Fatalf("the operator's end of the session: %v", e)
	}
	cast := sessionrec.CastPath(sessionrec.Dir(acme.StateDir), s.id)
	cluster.StartAgent(t, ims.URL(), "", acme.StateDir)
	var m sessionrec.Meta
	cluster.Eventually(t, 20*time.Second, "the restarted agent to end the session in the customer's record", func() bool {
		m, err = sessionrec.ReadMeta(sessionrec.Dir(acme.StateDir), s.id)
		return err == nil && !m.Ended.IsZero()
	})
	b, err := os.ReadFile(cast)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if m.SHA256 != hex.EncodeToString(sum[:]) || !strings.Contains(m.Reason, "the agent (pid") {
		t.Fatalf("summary after the restart: %+v; the recording's sha256 is %x", m, sum)
	}
	if list, _ := agentdCmd(t, "session", "--state-dir", acme.StateDir, "list"); strings.Contains(list, "running") {
		t.Fatalf("agentd session list after the restart:\n%s", list)
	}
	if out, code := agentdCmd(t, "audit", "--state-dir", acme.StateDir, "verify"); code != 0 {
		t.Fatalf("agentd audit verify: %s", out)
	}
	// Altered since, with the summary rewritten to match: play refuses it
	// on the journal's hash.
	altered := bytes.Replace(b, []byte("home-kept-42"), []byte("home-lost-42"), 1)
	if err := os.WriteFile(cast, altered, 0o600); err != nil {
		t.Fatal(err)
	}
	as := sha256.Sum256(altered)
	m.SHA256 = hex.EncodeToString(as[:])
	if err := sessionrec.WriteMeta(sessionrec.Dir(acme.StateDir), m); err != nil {
		t.Fatal(err)
	}
	if out, code := agentdCmd(t, "session", "--state-dir", acme.StateDir, "play", "--raw", s.id); code == 0 || !strings.Contains(out, "is altered") {
		t.Fatalf("agentd session play of an altered recording: exit %d\n%s", code, out)
	}
}

// A session opened with a named token does not outlive the token: its
// revocation ends the session within seconds, the operator told why, and
// imsd's audit of the end says so.
func TestSupportShellEndsWithItsToken(t *testing.T) {
	skipShort(t)
	ims, cli, acme, _ := startBreakGlass(t, fast)
	admin := ims.Admin()
	ctx := context.Background()
	grant := requestGrant(t, cli, "acme", "--reason", "INC-11", "--for", "1h")
	if out, code := breakglass(t, acme.StateDir, "approve", grant, "--role", "debugger", "--for", "1h", "--allow-sessions"); code != 0 {
		t.Fatalf("approve --allow-sessions: %d %s", code, out)
	}
	tok, err := admin.CreateApiToken(ctx, connect.NewRequest(&imsv1.CreateApiTokenRequest{Name: "acme-support", Role: imsv1.Role_ROLE_SUPPORT, Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	s, err := openShell(t, ims.Client(tok.Msg.Token), "acme")
	if err != nil {
		t.Fatal(err)
	}
	n := s.command(0, "echo up-$((40+2))")
	s.waitOutput(n, regexp.MustCompile(`up-42\r\n`), 10*time.Second)
	if _, err := admin.RevokeApiToken(ctx, connect.NewRequest(&imsv1.RevokeApiTokenRequest{IdOrName: "acme-support"})); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	e, at := s.waitEnded(10 * time.Second)
	if took := at.Sub(revoked); took > 3*time.Second || !strings.Contains(e.Reason, "may no longer hold this session") {
		t.Fatalf("session ended %s after its token's revocation: %q", took, e.Reason)
	}
	cluster.Eventually(t, 10*time.Second, "the customer's record of the session's end", func() bool {
		m, err := sessionrec.ReadMeta(sessionrec.Dir(acme.StateDir), s.id)
		return err == nil && !m.Ended.IsZero()
	})
	cluster.Eventually(t, 10*time.Second, "imsd's audit of the session's end", func() bool {
		r, err := admin.ListAuditEvents(ctx, connect.NewRequest(&imsv1.ListAuditEventsRequest{Install: "acme"}))
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range r.Msg.Events {
			if ev.Subject == s.id && ev.Kind == "support.session.ended" {
				return strings.Contains(ev.Data, "closed_by_imsd") && strings.Contains(ev.Data, "revoked")
			}
		}
		return false
	})
}
