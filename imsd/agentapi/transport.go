package agentapi

// The stream as agentapi reads and writes it: over connect-go (bidiStream)
// or agentwire, and the pre-authentication body limit.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

type stream = connect.BidiStream[agentv1.ConnectRequest, agentv1.ConnectResponse]

// Stream is one agent stream as Serve sees it: the connect-go handler's
// (Connect, below) or imsd's own agent-wire server's (package agentwire).
type Stream interface {
	// Send sends one message. It may be called from any goroutine, but
	// not from two at once (conn.mu serialises sends).
	Send(*agentv1.ConnectResponse) error
	// Flush sends at once what earlier Sends left pending: agentwire holds
	// the answers to messages that arrived together until the handler
	// next waits for the agent, and a message sent from another goroutine
	// (an assignment, a cancellation) must not wait for that.
	Flush() error
	// Receive returns the next message. With limit > 0, a wait of more
	// than limit ends it with an error matching os.ErrDeadlineExceeded,
	// after which the stream is unusable. io.EOF (or an error wrapping it,
	// or a cancellation) means the agent went away.
	Receive(limit time.Duration) (*agentv1.ConnectRequest, error)
}

// bidiStream adapts connect-go's handler stream to Stream. A Receive
// limit closes the request body (KeepBody) when it passes, the one way to
// end a read blocked on an agent that went silent without closing its
// connection.
type bidiStream struct {
	st *stream
	// json is set when the stream's codec is JSON.
	json bool
	body *preauthBody
	cut  *time.Timer
	idle atomic.Bool
}

func (b *bidiStream) Send(m *agentv1.ConnectResponse) error {
	if b.json {
		if err := decodeConfig(m); err != nil {
			return connect.NewError(connect.CodeInternal, err)
		}
	}
	return b.st.Send(m)
}

// authenticated lifts the limit on what the agent may send.
func (b *bidiStream) authenticated() { b.body.lift() }

// Flush does nothing: connect-go sends each message at once.
func (b *bidiStream) Flush() error { return nil }

func (b *bidiStream) Receive(limit time.Duration) (*agentv1.ConnectRequest, error) {
	if limit <= 0 {
		return b.st.Receive()
	}
	if b.cut == nil {
		b.cut = time.AfterFunc(limit, func() { b.idle.Store(true); b.body.Close() })
	} else {
		b.cut.Reset(limit)
	}
	m, err := b.st.Receive()
	b.cut.Stop()
	if err != nil && b.idle.Load() {
		return nil, fmt.Errorf("receive: %w", os.ErrDeadlineExceeded)
	}
	return m, err
}

type bodyKey struct{}

// KeepBody is middleware for the agent service: it lets a stream's handler
// close its own request body, the one way to end a read blocked on an agent
// that went silent without closing its connection. It also holds each
// request body to preauthMax bytes on the wire until the stream's hello
// is verified (an enrolment never is: its whole request is held to it),
// since until then anyone can send anything.
func KeepBody(next http.Handler, preauthMax int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := &preauthBody{ReadCloser: r.Body, left: int64(preauthMax), max: preauthMax}
		r = r.WithContext(context.WithValue(r.Context(), bodyKey{}, b))
		r.Body = b
		next.ServeHTTP(w, r)
	})
}

func bodyFrom(ctx context.Context) *preauthBody {
	b, _ := ctx.Value(bodyKey{}).(*preauthBody)
	return b
}

// preauthBody is a request body that yields at most left more bytes
// until lift is called. Read and lift run on the stream's goroutine;
// Close, from a Receive limit's timer, touches neither field.
type preauthBody struct {
	io.ReadCloser
	left   int64
	max    int
	lifted bool
}

func (b *preauthBody) Read(p []byte) (int, error) {
	if b.lifted {
		return b.ReadCloser.Read(p)
	}
	if b.left <= 0 {
		return 0, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("hello: more than %d bytes before the agent is authenticated", b.max))
	}
	n, err := b.ReadCloser.Read(p[:min(int64(len(p)), b.left)])
	b.left -= int64(n)
	return n, err
}

func (b *preauthBody) lift() { b.lifted = true }

func ignoreEOF(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		return nil
	}
	if connect.CodeOf(err) == connect.CodeCanceled {
		return nil
	}
	return err
}
