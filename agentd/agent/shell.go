package agent

// Support shells (byoc support shell): a PTY on the customer's side,
// opened through the agent's own stream, under a live break-glass grant
// the customer approved with sessions allowed, recorded in asciicast v2
// in STATE/sessions (package sessionrec).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/agentd/sessionrec"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// shellPoll is how often a session looks at its grant and kill file: the
// grant's end or the customer's kill ends it within this and the kill.
const shellPoll = 100 * time.Millisecond

// maxShells bounds the support sessions an agent runs at once, whatever
// imsd asks.
const maxShells = 8

// shellInputQueue bounds the operator's messages waiting for the PTY.
const shellInputQueue = 64

// DefaultMaxShellRecording is the most a session's recording may hold
// (ShellConfig.MaxRecordingBytes): the session ends when it reaches it,
// so that what an operator prints cannot fill the customer's disk.
const DefaultMaxShellRecording = 1 << 30

// ShellConfig serves support shells (Config.Shell).
type ShellConfig struct {
	// MaxRecordingBytes bounds each session's recording; 0 is
	// DefaultMaxShellRecording.
	MaxRecordingBytes int64
	// Start builds the shell's command (PluginRunner.Shell); nil: the
	// agent refuses every session.
	Start func(ctx context.Context, spec ShellSpec) (*exec.Cmd, func(), error)
	// RecordingsToVendor sends imsd a copy of each session's recording
	// after it ends (agentd --session-recordings-to-vendor): the
	// customer's choice, off by default. Recorded per session when it
	// starts (sessionrec.Meta.ToVendor): a session started without it is
	// never sent, and none is while it is off (recording.go).
	RecordingsToVendor bool
}

// shellSession is one running support shell.
type shellSession struct {
	id      string
	grantID string
	expires time.Time
	ptmx    *os.File
	cmd     *exec.Cmd
	rec     *sessionrec.Writer
	meta    sessionrec.Meta
	input   chan *agentv1.ShellInput
	// creditMu guards credit, the output bytes the agent may still send;
	// creditCh is signalled when it grows.
	creditMu sync.Mutex
	credit   int64
	creditCh chan struct{}
	// stop is closed, once, with stopReason, to end the session.
	stopOnce   sync.Once
	stop       chan struct{}
	stopReason string
	// abort is closed when the session's output can go nowhere (the
	// stream broke, the agent stops) or draining it took too long.
	abortOnce sync.Once
	abort     chan struct{}
	done      chan struct{}
}

func (s *shellSession) abortNow() { s.abortOnce.Do(func() { close(s.abort) }) }

func (s *shellSession) end(reason string) {
	s.stopOnce.Do(func() {
		s.stopReason = reason
		close(s.stop)
	})
}

func (s *shellSession) addCredit(n int64) {
	s.creditMu.Lock()
	s.credit += n
	s.creditMu.Unlock()
	select {
	case s.creditCh <- struct{}{}:
	default:
	}
}

// takeCredit waits for credit and returns how much there is.
func (s *shellSession) takeCredit() (int64, bool) {
	for {
		s.creditMu.Lock()
		c := s.credit
		s.creditMu.Unlock()
		if c > 0 {
			return c, true
		}
		select {
		case <-s.creditCh:
		case <-s.abort:
			return 0, false
		}
	}
}

func (s *shellSession) spend(n int64) {
	s.creditMu.Lock()
	s.credit -= n
	s.creditMu.Unlock()
}

// shellEvent queues a shell event for imsd; it gives up when the
// session's stream is gone.
func (a *Agent) shellEvent(ev *agentv1.ShellEvent, stop <-chan struct{}) bool {
	m := &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Shell{Shell: ev}}
	select {
	case a.shellOut <- m:
		return true
	case <-stop:
		return false
	}
}

// shellRefuse tells imsd a session was refused.
func (a *Agent) shellRefuse(id, why string) {
	a.log.Warn("support session refused", "session", id, "why", why)
	a.note("session.refused", "session:"+id, map[string]string{"reason": why})
	select {
	case a.shellOut <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Shell{Shell: &agentv1.ShellEvent{SessionId: id,
		Ended: &agentv1.ShellEnded{Refused: true, Reason: why}}}}:
	case <-time.After(5 * time.Second):
	}
}

// sessionGrant returns the live break-glass grant that allows sessions,
// or says why there is none.
func (a *Agent) sessionGrant() (permissions.Grant, string) {
	if why := a.refusal(string(permissions.BreakGlass)); why != "" {
		return permissions.Grant{}, strings.Replace(why, "break_glass jobs need", "support sessions need", 1)
	}
	gs, err := a.grants()
	if err != nil {
		return permissions.Grant{}, "refused: the customer's break-glass grants cannot be read: " + err.Error()
	}
	g, ok := gs.LiveSessions(a.now())
	if !ok {
		live, _ := gs.Live(a.now())
		return permissions.Grant{}, fmt.Sprintf("refused: support sessions need a live break-glass grant approved with sessions allowed "+
			"(agentd breakglass approve ID --role ROLE --for D --allow-sessions); grant %s does not allow them", live.ID)
	}
	return g, ""
}

// openShell handles a ShellOpen: checks, then starts the session. A
// session never outlives streamGone, its stream's end: one whose stream
// ended while it started is recorded and ended at once.
func (a *Agent) openShell(ctx context.Context, m *agentv1.ShellOpen, streamGone <-chan struct{}) {
	if err := checkShellOpen(m); err != nil {
		id := m.GetSessionId()
		if agentproto.CheckShellSessionID(id) != nil {
			a.log.Warn("support session with a bad id refused", "err", err)
			return
		}
		a.shellRefuse(id, "refused: "+err.Error())
		return
	}
	if a.cfg.Shell.Start == nil {
		a.shellRefuse(m.SessionId, "refused: this agent does not serve support sessions")
		return
	}
	a.shellMu.Lock()
	_, dup := a.shells[m.SessionId]
	full := len(a.shells)+a.shellsStarting >= maxShells
	if !dup && !full {
		a.shellsStarting++
	}
	a.shellMu.Unlock()
	if dup {
		return
	}
	if full {
		a.shellRefuse(m.SessionId, fmt.Sprintf("refused: %d support sessions are open on this agent, the most it runs at once", maxShells))
		return
	}
	reserved := true // the slot, until the session is in a.shells
	defer func() {
		if reserved {
			a.shellMu.Lock()
			a.shellsStarting--
			a.shellMu.Unlock()
		}
	}()
	g, why := a.sessionGrant()
	if why != "" {
		a.shellRefuse(m.SessionId, why)
		return
	}
	select {
	case <-streamGone:
		a.log.Warn("support session not started: the stream that asked for it ended", "session", m.SessionId)
		return
	default:
	}
	argv := m.Command
	if len(argv) == 0 {
		argv = []string{"/bin/sh", "-i"}
	}
	term := m.Term
	if term == "" {
		term = "xterm-256color"
	}
	ptmx, tty, err := pty.Open()
	if err != nil {
		a.shellRefuse(m.SessionId, "refused: open a terminal: "+err.Error())
		return
	}
	defer tty.Close() // the shell holds its own copy once started
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: uint16(m.Rows), Cols: uint16(m.Cols)}); err != nil {
		ptmx.Close()
		a.shellRefuse(m.SessionId, "refused: size the terminal: "+err.Error())
		return
	}
	cmd, cleanup, err := a.cfg.Shell.Start(ctx, ShellSpec{ID: m.SessionId, InstallID: a.id.InstallID, Component: m.Component,
		Argv: argv, Term: term, Grant: g.ID, Role: g.Role, TTY: tty.Name()})
	if err != nil {
		ptmx.Close()
		a.shellRefuse(m.SessionId, "refused: "+err.Error())
		return
	}
	dir := sessionrec.Dir(a.cfg.StateDir)
	start := a.now()
	rec, err := sessionrec.Create(dir, m.SessionId, sessionrec.Header{Width: int(m.Cols), Height: int(m.Rows),
		Title: fmt.Sprintf("byoc support session %s by %s", m.SessionId, m.Operator),
		Env:   map[string]string{"TERM": term, "SHELL": argv[0]}}, start)
	if err != nil {
		ptmx.Close()
		cleanup()
		a.shellRefuse(m.SessionId, "refused: the customer's recording cannot be written: "+err.Error())
		return
	}
	// The shell leads a session of its own whose controlling terminal is
	// the PTY: Ctrl-C reaches its foreground job through the line
	// discipline.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
	if err := cmd.Start(); err != nil {
		ptmx.Close()
		rec.Close()
		os.Remove(sessionrec.CastPath(dir, m.SessionId))
		cleanup()
		a.shellRefuse(m.SessionId, "refused: start the shell: "+err.Error())
		return
	}
	s := &shellSession{id: m.SessionId, grantID: g.ID, expires: g.ExpiresAt, ptmx: ptmx, cmd: cmd, rec: rec,
		input: make(chan *agentv1.ShellInput, shellInputQueue), credit: int64(m.WindowBytes), creditCh: make(chan struct{}, 1),
		stop: make(chan struct{}), abort: make(chan struct{}), done: make(chan struct{}),
		meta: sessionrec.Meta{ID: m.SessionId, Operator: m.Operator, Grant: g.ID, Component: m.Component, Command: m.Command,
			Started: start.UTC(), PID: os.Getpid(), ToVendor: a.cfg.Shell.RecordingsToVendor}}
	if err := sessionrec.WriteMeta(dir, s.meta); err != nil {
		a.log.Warn("write a support session's summary", "session", s.id, "err", err)
	}
	a.shellMu.Lock()
	a.shells[s.id] = s
	a.shellsStarting--
	reserved = false
	select {
	case <-streamGone:
		// endShells ran while it started: no one else will end it.
		s.end("ended: the agent's stream to imsd broke while the session started")
		s.abortNow()
	default:
	}
	a.shellMu.Unlock()
	a.note("session.started", "session:"+s.id, map[string]string{"operator": m.Operator, "grant": g.ID, "role": g.Role,
		"component": m.Component, "command": strings.Join(m.Command, " "), "recording": sessionrec.CastPath(dir, s.id)})
	a.log.Info("support session started", "session", s.id, "operator", m.Operator, "grant", g.ID)
	a.shellEvent(&agentv1.ShellEvent{SessionId: s.id, Opened: &agentv1.ShellOpened{GrantId: g.ID, GrantExpireTime: timestamppb.New(g.ExpiresAt)}}, s.abort)
	a.wg.Add(1)
	go a.runShell(ctx, s, cleanup)
}

// shellInput handles a ShellInput: queued for the session's writer, or
// credit at once. A session whose operator floods it ends.
func (a *Agent) shellInput(m *agentv1.ShellInput) {
	a.shellMu.Lock()
	s := a.shells[m.GetSessionId()]
	a.shellMu.Unlock()
	if s == nil {
		return
	}
	if err := checkShellInput(m); err != nil {
		s.end("ended: the operator's input broke the limits: " + err.Error())
		return
	}
	if m.CreditBytes > 0 {
		s.addCredit(int64(m.CreditBytes))
	}
	if m.Close {
		s.end("ended: the operator closed the session")
		return
	}
	if len(m.Data) == 0 && m.Rows == 0 {
		return
	}
	select {
	case s.input <- m:
	default:
		s.end("ended: the operator sent input faster than the shell read it")
	}
}

// endShells ends every session (the stream broke, the agent stops) and
// closes gone, so that a session still starting ends too (openShell).
func (a *Agent) endShells(reason string, gone chan struct{}) {
	a.shellMu.Lock()
	close(gone)
	for _, s := range a.shells {
		s.end(reason)
		s.abortNow()
	}
	a.shellMu.Unlock()
}

// runShell runs one session to its end.
func (a *Agent) runShell(ctx context.Context, s *shellSession, cleanup func()) {
	defer a.wg.Done()
	defer close(s.done)
	dir := sessionrec.Dir(a.cfg.StateDir)
	var wg sync.WaitGroup
	var outBytes, inBytes int64
	limit := a.cfg.Shell.MaxRecordingBytes
	if limit <= 0 {
		limit = DefaultMaxShellRecording
	}
	// full ends the session once its recording reached the limit.
	full := func() bool {
		if n := s.rec.Size(); n >= limit {
			s.end(fmt.Sprintf("ended: the session's recording reached %d bytes, the most the agent keeps of one session", limit))
			return true
		}
		return false
	}
	// Output: read as much as there is credit for, record it, send it.
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		buf := make([]byte, 10<<10) // valid UTF-8 of it fits in MaxShellData
		var carry []byte
		for {
			c, ok := s.takeCredit()
			if !ok {
				return
			}
			n, err := s.ptmx.Read(buf[:min(int64(len(buf)), c)])
			if n > 0 {
				text, rest := sessionrec.Text(carry, buf[:n])
				carry = rest
				if text != "" {
					s.spend(agentproto.ShellCost(len(text)))
					outBytes += int64(len(text))
					if rerr := s.rec.Event(a.now(), "o", text); rerr != nil {
						s.end("ended: the customer's recording cannot be written: " + rerr.Error())
						return
					}
					if !a.shellEvent(&agentv1.ShellEvent{SessionId: s.id, Output: []byte(text)}, s.abort) {
						return
					}
					if full() {
						return
					}
				}
			}
			if err != nil {
				if len(carry) > 0 {
					text := strings.ToValidUTF8(string(carry), "\uFFFD")
					outBytes += int64(len(text))
					s.rec.Event(a.now(), "o", text)
					a.shellEvent(&agentv1.ShellEvent{SessionId: s.id, Output: []byte(text)}, s.abort)
				}
				return
			}
		}
	}()
	// Input and resizes, in order.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-s.stop:
				return
			case m := <-s.input:
				if m.Rows != 0 {
					if err := pty.Setsize(s.ptmx, &pty.Winsize{Rows: uint16(m.Rows), Cols: uint16(m.Cols)}); err == nil {
						s.rec.Event(a.now(), "r", fmt.Sprintf("%dx%d", m.Cols, m.Rows))
					}
				}
				if len(m.Data) > 0 {
					if full() {
						return // neither recorded nor typed
					}
					inBytes += int64(len(m.Data))
					s.rec.Event(a.now(), "i", strings.ToValidUTF8(string(m.Data), "\uFFFD"))
					if _, err := s.ptmx.Write(m.Data); err != nil {
						return
					}
				}
			}
		}
	}()
	// The grant, the kill file and the process.
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()
	t := time.NewTicker(shellPoll)
	defer t.Stop()
	var waitErr error
	processDone := false
	for !processDone {
		select {
		case waitErr = <-exited:
			processDone = true
			s.end("ended: the command exited")
		case <-s.stop:
			processDone = true
		case <-ctx.Done():
			s.end("ended: the agent is stopping")
			s.abortNow()
		case <-t.C:
			if why := a.shellGrantEnded(s); why != "" {
				s.end(why)
			} else if _, err := os.Stat(sessionrec.KillPath(dir, s.id)); err == nil {
				s.end("ended: killed by the customer (agentd session kill)")
			}
		}
	}
	// Kill whatever is left of the shell: its process group (the
	// sandbox's PID namespace dies with its init).
	if s.cmd.Process != nil {
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		s.cmd.Process.Kill()
	}
	if waitErr == nil {
		select {
		case waitErr = <-exited:
		case <-time.After(5 * time.Second):
		}
	}
	// The output still in the PTY (the command's last words), unless it
	// can go nowhere; then nothing more.
	select {
	case <-outDone:
	case <-time.After(2 * time.Second):
	}
	s.abortNow()
	s.ptmx.Close()
	<-outDone
	wg.Wait()
	cleanup()
	code := -1
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		code = ee.ExitCode()
	} else if waitErr == nil && s.cmd.ProcessState != nil {
		code = s.cmd.ProcessState.ExitCode()
	}
	sum, size, rerr := s.rec.Close()
	reason := s.stopReason
	if rerr != nil {
		reason += "; the recording is incomplete: " + rerr.Error()
	}
	s.meta.Ended, s.meta.Reason, s.meta.ExitCode = a.now().UTC(), reason, code
	s.meta.OutputBytes, s.meta.InputBytes, s.meta.SHA256, s.meta.Size, s.meta.PID = outBytes, inBytes, sum, size, 0
	if err := sessionrec.WriteMeta(dir, s.meta); err != nil {
		a.log.Warn("write a support session's summary", "session", s.id, "err", err)
	}
	os.Remove(sessionrec.KillPath(dir, s.id))
	a.note("session.ended", "session:"+s.id, map[string]string{"operator": s.meta.Operator, "grant": s.grantID, "reason": reason,
		"exit_code": itoa(int64(code)), "recording_sha256": sum, "recording_bytes": itoa(size),
		"output_bytes": itoa(outBytes), "input_bytes": itoa(inBytes)})
	a.log.Info("support session ended", "session", s.id, "reason", reason, "recording_sha256", sum)
	a.shellMu.Lock()
	delete(a.shells, s.id)
	a.shellMu.Unlock()
	ev := &agentv1.ShellEvent{SessionId: s.id, Ended: &agentv1.ShellEnded{Reason: reason, ExitCode: int32(code),
		RecordingSha256: sum, RecordingBytes: size, OutputBytes: outBytes, InputBytes: inBytes}}
	select {
	case a.shellOut <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Shell{Shell: ev}}:
	case <-time.After(5 * time.Second):
		return
	}
	if s.meta.ToVendor && rerr == nil {
		a.kickRecordings() // recording.go
	}
}

// closeAbandonedSessions ends, in the customer's record, the sessions
// an agent that is gone left running (killed, crashed, the machine
// stopped): each recording is hashed as it is, its summary says how the
// session ended, and the journal gets the session.ended record agentd
// session play checks the recording against from then on. A session
// whose agent process still runs (another agentd on this state dir) is
// left alone. The end of each of these, and of every session that
// ended before its end reached imsd (the stream was gone, then the
// agent stopped), goes out on the first stream: imsd's audit has the
// session's start and records its end once.
func (a *Agent) closeAbandonedSessions() {
	dir := sessionrec.Dir(a.cfg.StateDir)
	ms, err := sessionrec.List(dir)
	if err != nil {
		a.log.Warn("read the support sessions' summaries", "err", err)
		return
	}
	for _, m := range ms {
		if m.Ended.IsZero() && m.PID != 0 && m.PID != os.Getpid() && syscall.Kill(m.PID, 0) != syscall.ESRCH {
			continue
		}
		if m.Ended.IsZero() {
			var sum string
			var size int64
			if b, err := os.ReadFile(sessionrec.CastPath(dir, m.ID)); err == nil {
				h := sha256.Sum256(b)
				sum, size = hex.EncodeToString(h[:]), int64(len(b))
			}
			m.Ended, m.ExitCode, m.SHA256, m.Size = a.now().UTC(), -1, sum, size
			m.Reason = fmt.Sprintf("ended: the agent (pid %d) stopped during the session, which ended with it; the recording holds what was written until then", m.PID)
			m.PID = 0
			if err := sessionrec.WriteMeta(dir, m); err != nil {
				a.log.Warn("write a support session's summary", "session", m.ID, "err", err)
				continue
			}
			os.Remove(sessionrec.KillPath(dir, m.ID))
			a.note("session.ended", "session:"+m.ID, map[string]string{"operator": m.Operator, "grant": m.Grant, "reason": m.Reason,
				"exit_code": "-1", "recording_sha256": sum, "recording_bytes": itoa(size)})
			a.log.Warn("support session left running by a stopped agent, ended", "session", m.ID, "recording_sha256", sum)
		}
		if m.Reported {
			continue
		}
		select {
		case a.shellOut <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Shell{Shell: &agentv1.ShellEvent{SessionId: m.ID,
			Ended: &agentv1.ShellEnded{Reason: m.Reason, ExitCode: int32(m.ExitCode), RecordingSha256: m.SHA256, RecordingBytes: m.Size,
				OutputBytes: m.OutputBytes, InputBytes: m.InputBytes}}}}:
		default:
			// Reported at a later start.
		}
	}
}

// shellEndSent notes in session id's summary that its end went out to
// imsd (Meta.Reported).
func (a *Agent) shellEndSent(id string) {
	dir := sessionrec.Dir(a.cfg.StateDir)
	m, err := sessionrec.ReadMeta(dir, id)
	if err != nil || m.Ended.IsZero() || m.Reported {
		return
	}
	m.Reported = true
	if err := sessionrec.WriteMeta(dir, m); err != nil {
		a.log.Warn("write a support session's summary", "session", id, "err", err)
	}
}

// shellGrantEnded says why s's grant no longer allows it ("" while it
// does): revoked, expired, or break-glass turned off.
func (a *Agent) shellGrantEnded(s *shellSession) string {
	if why := a.refusal(string(permissions.BreakGlass)); why != "" {
		return "ended in the customer's account: " + strings.TrimPrefix(why, "refused: ")
	}
	gs, err := a.grants()
	if err != nil {
		return "ended: the customer's break-glass grants cannot be read: " + err.Error()
	}
	if why := gs.Ended(s.grantID, a.now()); why != "" {
		return "ended: " + why
	}
	return ""
}
