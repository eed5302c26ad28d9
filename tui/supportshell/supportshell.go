// Package supportshell is the operator's end of a support session: it
// opens imsd's SupportShell stream for an install, prints the
// break-glass banner with the time left on the grant, puts the terminal
// in raw mode, carries keys, resizes and output until the session ends,
// and says how it ended (reason, exit code, the customer's recording's
// size and SHA-256). `byoc support shell` and the console (which hands
// its terminal over with tea.Exec) both run a session through Run.
package supportshell

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/charmbracelet/x/term"
	"github.com/muesli/cancelreader"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// Options say what to open and where the session's bytes go.
type Options struct {
	// Install is the install's name or id; Component the component the
	// shell is for ("": none); Command runs instead of /bin/sh.
	Install, Component string
	Command            []string
	// Term is $TERM for the PTY ("": xterm-256color).
	Term string
	// Stdin carries the keys; Stdout receives the session's output;
	// Banner (the CLI's stderr, the console's terminal) the banner and
	// the end's line.
	Stdin          io.Reader
	Stdout, Banner io.Writer
	// Terminal says Stdin and Stdout are a terminal (both *os.File): it
	// is put in raw mode, and its size and resizes are the PTY's.
	Terminal bool
	// Now is the clock of the banner's time left (nil: time.Now).
	Now func() time.Time
}

// Result is what is known of a session once Run returns.
type Result struct {
	// SessionID and GrantID are set once the agent started the session.
	SessionID, GrantID string
	GrantExpire        time.Time
	// Ended is the session's end as the agent said it (nil when the
	// stream broke before).
	Ended *imsv1.SupportShellEnded
}

// ErrNoEnd is Run's error when imsd closed the stream without the
// session's end.
var ErrNoEnd = errors.New("the session ended without saying how")

// Run opens a session on o.Install through c (a client that can carry a
// bidirectional stream: HTTP/2) and runs it to its end. The error is
// imsd's refusal, a broken stream (ErrNoEnd when it closed cleanly) or
// a failed write of the output; a session that ended has Result.Ended
// set and a nil error, whatever its exit code. When Run returns it has
// stopped reading o.Stdin (a terminal's read is cancelled), so the
// caller (the console) can read the terminal again.
func Run(ctx context.Context, c imsv1connect.OperatorServiceClient, o Options) (*Result, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	in, _ := o.Stdin.(*os.File)
	out, _ := o.Stdout.(*os.File)
	tty := o.Terminal && in != nil && out != nil
	rows, cols := uint32(24), uint32(80)
	if tty {
		if r, c, ok := size(out); ok {
			rows, cols = r, c
		}
	}
	termName := o.Term
	if termName == "" {
		termName = "xterm-256color"
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := c.SupportShell(ctx)
	var sendMu sync.Mutex // the input, the resizes and the close share the stream
	send := func(m *imsv1.SupportShellRequest) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return st.Send(m)
	}
	if err := send(&imsv1.SupportShellRequest{Install: o.Install, Open: &imsv1.SupportShellOpen{Component: o.Component, Command: o.Command,
		Size: &imsv1.TerminalSize{Rows: rows, Cols: cols}, Term: termName}}); err != nil && !errors.Is(err, io.EOF) {
		return &Result{}, err
	}
	first, err := st.Receive()
	if err != nil {
		return &Result{}, err
	}
	if first.Started == nil {
		return &Result{}, fmt.Errorf("imsd answered the session's start with no start")
	}
	res := &Result{SessionID: first.SessionId, GrantID: first.Started.GrantId, GrantExpire: first.Started.GetGrantExpireTime().AsTime()}
	fmt.Fprintf(o.Banner, "[byoc] BREAK-GLASS support session %s on %s under grant %s (until %s, %s left); recorded by the customer's agent\r\n",
		res.SessionID, o.Install, res.GrantID, res.GrantExpire.Local().Format(time.DateTime), res.GrantExpire.Sub(o.Now()).Round(time.Second))

	stdin := o.Stdin
	if tty {
		old, err := term.MakeRaw(in.Fd())
		if err == nil {
			defer term.Restore(in.Fd(), old)
		}
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		stop, resized := make(chan struct{}), make(chan struct{})
		defer func() { signal.Stop(winch); close(stop); <-resized }()
		go func() {
			defer close(resized)
			for {
				select {
				case <-stop:
					return
				case <-winch:
					if r, c, ok := size(out); ok {
						send(&imsv1.SupportShellRequest{Resize: &imsv1.TerminalSize{Rows: r, Cols: c}})
					}
				}
			}
		}()
		// A read of the terminal that outlived the session would take
		// the next key from whoever reads the terminal after it (the
		// console): the read is cancelled, and waited for, at the end.
		if cr, err := cancelreader.NewReader(in); err == nil {
			stdin = cr
			read := make(chan struct{})
			defer func() { cr.Cancel(); cancel(); <-read; cr.Close() }()
			go func() { defer close(read); forward(stdin, send) }()
		} else {
			go forward(stdin, send)
		}
	} else {
		// A pipe's read cannot be cancelled: the CLI exits after the
		// session, and nothing else reads it.
		go forward(stdin, send)
	}
	for {
		m, err := st.Receive()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return res, ErrNoEnd
			}
			return res, err
		}
		if len(m.Output) > 0 {
			if _, err := o.Stdout.Write(m.Output); err != nil {
				send(&imsv1.SupportShellRequest{Close: true})
				return res, fmt.Errorf("writing the session's output: %w", err)
			}
		}
		if e := m.Ended; e != nil {
			sendMu.Lock()
			st.CloseRequest()
			sendMu.Unlock()
			res.Ended = e
			fmt.Fprintf(o.Banner, "\r\n[byoc] %s\r\n", EndText(res))
			return res, nil
		}
	}
}

// EndText says how a session ended, as "session ss_1 ended: the command
// exited (the customer's recording: 812 bytes, sha256 ab…)".
func EndText(r *Result) string {
	s := fmt.Sprintf("session %s %s", r.SessionID, r.Ended.GetReason())
	if e := r.Ended; e.GetRecordingSha256() != "" {
		s += fmt.Sprintf(" (the customer's recording: %d bytes, sha256 %s)", e.RecordingBytes, e.RecordingSha256)
	}
	return s
}

// forward sends what r reads as the session's input until r fails (its
// end, or a cancelled read) or the stream does.
func forward(r io.Reader, send func(*imsv1.SupportShellRequest) error) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if send(&imsv1.SupportShellRequest{Input: append([]byte(nil), buf[:n]...)}) != nil {
				return
			}
		}
		if err != nil {
			return // the session ends when its command does
		}
	}
}

// size is the terminal's rows and columns (at most 1000 each).
func size(f *os.File) (rows, cols uint32, ok bool) {
	w, h, err := term.GetSize(f.Fd())
	if err != nil || w <= 0 || h <= 0 {
		return 0, 0, false
	}
	return uint32(min(h, 1000)), uint32(min(w, 1000)), true
}
