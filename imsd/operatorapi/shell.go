package operatorapi

// byoc support shell: an interactive shell in an install, relayed
// between the operator's call and the agent's own stream (no connection
// to the agent: the agent holds the stream open to imsd).

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// shellRelayBuf bounds a session's events waiting for the operator's
// call: the agent spends at least agentproto.ShellCost of its window a
// message, so a well-behaved agent never has more in flight.
const shellRelayBuf = agentproto.DefaultShellWindow/agentproto.MinShellCost + 8

// shellRecheck is how often a session's caller is checked again
// (recheckFrom): a revoked or expired API token ends its sessions within
// about this, on the replica that revoked it (other replicas: within
// their token cache's life besides).
const shellRecheck = time.Second

// shellEndWait is how long the call waits for the agent to say how a
// session it asked to close ended (its recording's hash, for the audit).
const shellEndWait = 5 * time.Second

// checkShellOpen checks what the operator controls of a session's start.
func checkShellOpen(o *imsv1.SupportShellOpen) error {
	if o == nil {
		return errs.Field("open", "is required on the first message")
	}
	if err := agentproto.CheckShellComponent(o.Component); err != nil {
		return errs.Field("open.component", "%s", strings.TrimPrefix(err.Error(), "component: "))
	}
	if err := agentproto.CheckShellCommand(o.Command); err != nil {
		return errs.Field("open."+strings.SplitN(err.Error(), ":", 2)[0], "%s", strings.TrimSpace(strings.SplitN(err.Error(), ":", 2)[1]))
	}
	if err := agentproto.CheckTerminalSize("size", o.GetSize().GetRows(), o.GetSize().GetCols()); err != nil {
		return errs.Field("open.size", "%s", strings.TrimPrefix(err.Error(), "size: "))
	}
	if err := agentproto.CheckShellTerm(o.Term); err != nil {
		return errs.Field("open.term", "%s", strings.TrimPrefix(err.Error(), "term: "))
	}
	return nil
}

// checkShellInput checks a later message of a session.
func checkShellInput(m *imsv1.SupportShellRequest) error {
	if m.Open != nil {
		return errs.Field("open", "only the first message opens the session")
	}
	if len(m.Input) > agentproto.MaxShellData {
		return errs.Field("input", "%d bytes, at most %d", len(m.Input), agentproto.MaxShellData)
	}
	if m.Resize != nil {
		if err := agentproto.CheckTerminalSize("resize", m.Resize.Rows, m.Resize.Cols); err != nil {
			return errs.Field("resize", "%s", strings.TrimPrefix(err.Error(), "resize: "))
		}
	}
	return nil
}

// SupportShell opens a support shell in an install through its agent's
// stream on this replica and relays it until it ends: the agent refuses
// it without a live break-glass grant the customer approved with
// sessions allowed, records it on the customer's side, and ends it when
// the grant ends or the customer kills it. Audited as
// support.session.started (or .refused) and support.session.ended, with
// the recording's SHA-256 the agent reports.
func (s *Service) SupportShell(ctx context.Context, st *connect.BidiStream[imsv1.SupportShellRequest, imsv1.SupportShellResponse]) error {
	first, err := st.Receive()
	if err != nil {
		return err
	}
	if first.Install == "" {
		return s.err(ctx, errs.Field("install", "is required"))
	}
	if err := checkShellOpen(first.Open); err != nil {
		return s.err(ctx, err)
	}
	in, err := s.store.GetInstall(ctx, first.Install)
	if err != nil {
		return s.err(ctx, err)
	}
	sess := s.hub.InstallSession(in.ID)
	if sess == nil {
		return s.err(ctx, errs.E(errs.Conflict, "install %s has no agent connected to this imsd replica: a support shell needs the agent's stream "+
			"(byoc install get %s shows whether it is connected; with several imsd replicas, reach the one holding it)", in.Name, in.Name))
	}
	p := callerFrom(ctx)
	id := auth.NewID("ss_")
	o := first.Open
	relay := s.hub.AddShell(sess.AgentID, id, shellRelayBuf)
	defer s.hub.RemoveShell(id)
	open := &agentv1.ShellOpen{SessionId: id, Operator: p.Actor(), Component: o.Component, Command: o.Command,
		Rows: o.GetSize().GetRows(), Cols: o.GetSize().GetCols(), Term: o.Term, WindowBytes: agentproto.DefaultShellWindow}
	base := map[string]string{"install": in.Name, "session": id, "agent": sess.AgentID, "component": o.Component,
		"command": strings.Join(o.Command, " ")}
	if err := sess.Push(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_ShellOpen{ShellOpen: open}}); err != nil {
		return s.err(ctx, errs.E(errs.Unavailable, "the agent's stream broke: %v", err))
	}
	push := func(m *agentv1.ShellInput) error {
		m.SessionId = id
		return sess.Push(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_ShellInput{ShellInput: m}})
	}
	// refusedWhy is set when imsd closed the session because its caller
	// no longer may hold it (recheck).
	var refusedWhy string
	var inputStopped atomic.Bool
	// startRecorded says the session's start is in the store, which then
	// records its end once (store.EndSupportSession).
	var startRecorded bool
	audit := func(kind string, data map[string]string) {
		d := map[string]string{}
		for k, v := range base {
			if v != "" {
				d[k] = v
			}
		}
		for k, v := range data {
			d[k] = v
		}
		if refusedWhy != "" {
			d["closed_by_imsd"] = refusedWhy
		}
		ev := store.AuditEvent{Chain: in.ID, At: s.now(), Kind: kind, Actor: p.Actor(), Subject: id, Data: d}
		wctx := context.WithoutCancel(ctx)
		var err error
		switch {
		case kind == "support.session.started":
			err = s.store.StartSupportSession(wctx, store.SupportSession{ID: id, InstallID: in.ID, AgentID: sess.AgentID, StartedAt: ev.At}, ev)
			startRecorded = err == nil
		case kind == "support.session.ended" && startRecorded:
			// Not if the agent's report of the end came first
			// (agentapi's lateShellEnd, on another stream).
			_, err = s.store.EndSupportSession(wctx, id, "", ev)
		default:
			err = s.store.RecordAudit(wctx, ev)
		}
		if err != nil {
			s.log.Error("audit a support session", "kind", kind, "session", id, "err", err)
		}
	}

	// The operator's messages: input, resizes, close.
	opErr := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		select {
		case <-started:
		case <-relay.Gone:
			return
		case <-ctx.Done():
			return
		}
		for {
			m, err := st.Receive()
			if err != nil {
				opErr <- err
				return
			}
			if err := checkShellInput(m); err != nil {
				opErr <- err
				return
			}
			if inputStopped.Load() {
				// Closed by imsd: nothing more reaches the shell.
				opErr <- io.EOF
				return
			}
			in := &agentv1.ShellInput{Data: m.Input, Close: m.Close}
			if m.Resize != nil {
				in.Rows, in.Cols = m.Resize.Rows, m.Resize.Cols
			}
			if err := push(in); err != nil {
				opErr <- err
				return
			}
			if m.Close {
				opErr <- io.EOF
				return
			}
		}
	}()

	var opened bool
	var credit uint32
	var endErr error
	closing := false
	var deadline <-chan time.Time
	var recheckC <-chan time.Time
	recheck := recheckFrom(ctx)
	if recheck != nil {
		tk := time.NewTicker(shellRecheck)
		defer tk.Stop()
		recheckC = tk.C
	}
	for {
		var ev any
		select {
		case <-recheckC:
			if closing {
				continue
			}
			err := recheck(ctx, first)
			if c := connect.CodeOf(err); err == nil || (c != connect.CodeUnauthenticated && c != connect.CodePermissionDenied) {
				continue // allowed, or not known now: checked again at the next tick
			}
			var ce *connect.Error
			refusedWhy = err.Error()
			if errors.As(err, &ce) {
				refusedWhy = ce.Message()
			}
			inputStopped.Store(true)
			push(&agentv1.ShellInput{Close: true})
			closing, deadline, endErr = true, time.After(shellEndWait), err
			st.Send(&imsv1.SupportShellResponse{SessionId: id, Ended: &imsv1.SupportShellEnded{
				Reason: "ended by imsd: the caller may no longer hold this session: " + refusedWhy}})
			continue
		case ev = <-relay.Events:
		case <-relay.Gone:
			// Events already taken first.
			select {
			case ev = <-relay.Events:
			default:
				reason := "the agent's stream to imsd ended"
				if relay.Overflowed {
					reason = "the agent sent more output than its flow-control window"
				}
				if opened {
					audit("support.session.ended", map[string]string{"reason": reason})
				}
				if !closing {
					st.Send(&imsv1.SupportShellResponse{SessionId: id, Ended: &imsv1.SupportShellEnded{Reason: reason}})
				}
				return endErr
			}
		case err := <-opErr:
			opErr = nil
			if !errors.Is(err, io.EOF) && connect.CodeOf(err) != connect.CodeCanceled {
				endErr = err
			}
			push(&agentv1.ShellInput{Close: true})
			closing, deadline = true, time.After(shellEndWait)
			continue
		case <-ctx.Done():
			if !closing {
				push(&agentv1.ShellInput{Close: true})
				closing, deadline = true, time.After(shellEndWait)
			}
			ctx = context.WithoutCancel(ctx)
			continue
		case <-deadline:
			audit("support.session.ended", map[string]string{"reason": "the operator left; the agent did not say how the session ended"})
			return endErr
		}
		e, _ := ev.(*agentv1.ShellEvent)
		switch {
		case e.GetOpened() != nil:
			if opened {
				continue // said once: a second is not a second start
			}
			opened = true
			close(started)
			audit("support.session.started", map[string]string{"grant": e.Opened.GrantId,
				"grant_expires": e.Opened.GetGrantExpireTime().AsTime().UTC().Format(time.RFC3339)})
			if !closing {
				st.Send(&imsv1.SupportShellResponse{SessionId: id, Started: &imsv1.SupportShellStarted{GrantId: e.Opened.GrantId,
					GrantExpireTime: e.Opened.GrantExpireTime}})
			}
		case len(e.GetOutput()) > 0:
			if !closing {
				if err := st.Send(&imsv1.SupportShellResponse{SessionId: id, Output: e.Output}); err != nil {
					push(&agentv1.ShellInput{Close: true})
					closing, deadline = true, time.After(shellEndWait)
					continue
				}
			}
			// Credit back once delivered: the agent sends no more than
			// its window ahead of the operator.
			credit += uint32(agentproto.ShellCost(len(e.Output)))
			if credit >= agentproto.DefaultShellWindow/8 || len(relay.Events) == 0 {
				if err := push(&agentv1.ShellInput{CreditBytes: credit}); err == nil {
					credit = 0
				}
			}
		case e.GetEnded() != nil:
			en := e.Ended
			if en.Refused {
				audit("support.session.refused", map[string]string{"reason": en.Reason})
				err := errs.E(errs.Conflict, "the install's agent refused the support session: %s", en.Reason)
				return s.err(ctx, err)
			}
			audit("support.session.ended", map[string]string{"reason": en.Reason, "exit_code": strconv.Itoa(int(en.ExitCode)),
				"recording_sha256": en.RecordingSha256, "recording_bytes": strconv.FormatInt(en.RecordingBytes, 10),
				"output_bytes": strconv.FormatInt(en.OutputBytes, 10), "input_bytes": strconv.FormatInt(en.InputBytes, 10)})
			if !closing {
				st.Send(&imsv1.SupportShellResponse{SessionId: id, Ended: &imsv1.SupportShellEnded{Reason: en.Reason, ExitCode: en.ExitCode,
					RecordingSha256: en.RecordingSha256, RecordingBytes: en.RecordingBytes}})
			}
			return endErr
		}
	}
}
