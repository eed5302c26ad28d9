package agent

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/agentd/sessionrec"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// A support session does not outlive the stream that asked for it, even
// when the stream ends while the session is still starting (its
// credentials being fetched): it is recorded, ended at once, and its

// sessionAgent starts an agent on a fake imsd with configure applied,
// break-glass on and a live grant (bg_1) that allows sessions, and
// returns its state dir, the fake imsd and the agent's stream.
func sessionAgent(t *testing.T, configure func(*Config)) (string, *fakeIMS, *fakeStream) {
	t.Helper()
	dir := t.TempDir()
	f := &fakeIMS{}
	a, _ := startFakeWith(t, f, &runRecorder{release: make(chan struct{})}, dir, nil, configure)
	setPermissions(t, a, func(s *permissions.State) { s.BreakGlass = true })
	now := time.Now()
	if _, err := permissions.UpdateGrants(dir, func(g *permissions.Grants) error {
		g.Grants = append(g.Grants, permissions.Grant{ID: "bg_1", ApprovedAt: now, ExpiresAt: now.Add(time.Hour), AllowSessions: true})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	fs := <-f.streams
	return dir, f, fs
}

// command killed, not left running with no operator until the grant ends.
func TestShellStartingAsItsStreamEndsEnds(t *testing.T) {
	starting, release := make(chan struct{}), make(chan struct{})
	cmds := make(chan *exec.Cmd, 1)
	start := func(ctx context.Context, spec ShellSpec) (*exec.Cmd, func(), error) {
		close(starting)
		<-release // an AssumeRole, say, still under way
		cmd := exec.Command("sleep", "300")
		cmds <- cmd
		return cmd, func() {}, nil
	}
	dir, f, fs := sessionAgent(t, func(c *Config) { c.Shell.Start = start })
	const id = "ss_startingstream1"
	fs.down <- &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_ShellOpen{ShellOpen: &agentv1.ShellOpen{SessionId: id,
		Operator: "alice", Rows: 24, Cols: 80, WindowBytes: agentproto.DefaultShellWindow}}}
	select {
	case <-starting:
	case <-time.After(10 * time.Second):
		t.Fatal("the session never started")
	}
	fs.down <- nil // the stream ends
	<-f.streams    // the agent is on its next stream: it ended the old one's sessions
	close(release)

	var m sessionrec.Meta
	eventually(t, "the session to end with the stream that asked for it", func() bool {
		var err error
		m, err = sessionrec.ReadMeta(sessionrec.Dir(dir), id)
		return err == nil && !m.Ended.IsZero()
	})
	if !strings.Contains(m.Reason, "stream to imsd broke") {
		t.Fatalf("session ended: %q", m.Reason)
	}
	// Killed and reaped by the agent at the session's end.
	if pid := (<-cmds).Process.Pid; syscall.Kill(pid, 0) != syscall.ESRCH {
		t.Fatalf("the session's command (pid %d) still runs", pid)
	}
}

// What an operator prints cannot fill the customer's disk: a session
// ends when its recording reaches the agent's limit, which the recording
// then barely exceeds (by the last event).
func TestShellRecordingIsBounded(t *testing.T) {
	const limit = 64 << 10
	start := func(ctx context.Context, spec ShellSpec) (*exec.Cmd, func(), error) {
		return exec.Command("sh", "-c", "while :; do echo aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa; done"), func() {}, nil
	}
	dir, _, fs := sessionAgent(t, func(c *Config) { c.Shell.Start, c.Shell.MaxRecordingBytes = start, limit })
	const id = "ss_boundedrecording1"
	fs.down <- &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_ShellOpen{ShellOpen: &agentv1.ShellOpen{SessionId: id,
		Operator: "alice", Rows: 24, Cols: 80, WindowBytes: agentproto.DefaultShellWindow}}}
	// imsd's side: every output message delivered and credited back.
	go func() {
		for {
			select {
			case m := <-fs.up:
				if o := m.GetShell().GetOutput(); len(o) > 0 {
					fs.down <- &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_ShellInput{ShellInput: &agentv1.ShellInput{SessionId: id,
						CreditBytes: uint32(agentproto.ShellCost(len(o)))}}}
				}
			case <-fs.done:
				return
			}
		}
	}()
	var m sessionrec.Meta
	eventually(t, "the session to end at its recording's limit", func() bool {
		var err error
		m, err = sessionrec.ReadMeta(sessionrec.Dir(dir), id)
		return err == nil && !m.Ended.IsZero()
	})
	if !strings.Contains(m.Reason, "recording reached") || m.Size < limit || m.Size > limit+agentproto.MaxShellData*2 {
		t.Fatalf("session ended %q with a recording of %d bytes (limit %d)", m.Reason, m.Size, limit)
	}
}

// However many sessions imsd asks for, the agent runs at most maxShells
// at once and refuses the next, saying why.
func TestShellsAreBounded(t *testing.T) {
	start := func(ctx context.Context, spec ShellSpec) (*exec.Cmd, func(), error) {
		return exec.Command("sleep", "300"), func() {}, nil
	}
	_, _, fs := sessionAgent(t, func(c *Config) { c.Shell.Start = start })
	for i := range maxShells + 1 {
		fs.down <- &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_ShellOpen{ShellOpen: &agentv1.ShellOpen{SessionId: fmt.Sprintf("ss_manysessions%02d", i),
			Operator: "alice", Rows: 24, Cols: 80, WindowBytes: agentproto.DefaultShellWindow}}}
	}
	opened, refused := 0, 0
	deadline := time.After(20 * time.Second)
	for opened+refused < maxShells+1 {
		select {
		case m := <-fs.up:
			switch ev := m.GetShell(); {
			case ev.GetOpened() != nil:
				opened++
			case ev.GetEnded().GetRefused():
				refused++
				if !strings.Contains(ev.Ended.Reason, "the most it runs at once") {
					t.Fatalf("refusal: %q", ev.Ended.Reason)
				}
			}
		case <-deadline:
			t.Fatalf("%d sessions opened and %d refused, want %d and 1", opened, refused, maxShells)
		}
	}
	if opened != maxShells || refused != 1 {
		t.Fatalf("%d sessions opened and %d refused, want %d and 1", opened, refused, maxShells)
	}
}
