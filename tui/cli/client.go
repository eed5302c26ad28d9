package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// target is the server a command talks to and how it got chosen.
type target struct {
	server  string
	token   string
	context string // empty when --server chose the server
}

// resolveTarget picks the server and token: --server and --token override
// the context chosen by --context or the config's current context, as
// kubectl's flags do. --server alone takes the token of the current
// context if it is for that server, else of the first context that is
// (sameServer). A context's token is never sent to a server other than
// the context's own.
func (a *app) resolveTarget() (*target, error) {
	path, err := configPath(a.getenv)
	if err != nil {
		return nil, err
	}
	cfg, err := loadConfig(path)
	if err != nil {
		return nil, err
	}
	name := a.contextName
	if name == "" {
		name = cfg.CurrentContext
	}
	var cc *ConfigContext
	if name != "" {
		cc = cfg.Context(name)
		if cc == nil && (a.contextName != "" || a.server == "") {
			return nil, fmt.Errorf("context %q not found in %s; add it with: byoc context add %s --server URL --token TOKEN --use", name, path, name)
		}
	}
	t := &target{server: a.server, token: a.token}
	var session *ConfigContext
	use := func(cc *ConfigContext) {
		t.server = cc.Server
		t.context = cc.Name
		if t.token == "" {
			t.token = cc.Token
		}
		if t.token == "" && cc.Session != nil {
			session = cc
		}
	}
	switch {
	case cc != nil && (t.server == "" || sameServer(t.server, cc.Server)):
		use(cc)
	case t.server != "" && a.contextName == "":
		// --server alone: the token of a context for that server, if
		// one has it (the current one was not).
		for i := range cfg.Contexts {
			if sameServer(t.server, cfg.Contexts[i].Server) {
				use(&cfg.Contexts[i])
				break
			}
		}
	}
	if t.server == "" {
		return nil, errors.New("no context selected; add one with: byoc context add NAME --server URL --token TOKEN --use (or pass --server and --token)")
	}
	if err := checkServerURL(t.server); err != nil {
		return nil, &usageError{msg: err.Error()}
	}
	if session != nil {
		if t.token, err = a.sessionToken(context.Background(), path, cfg, session); err != nil {
			return nil, err
		}
	}
	if t.token == "" {
		return nil, &usageError{msg: fmt.Sprintf("no token for %s; pass --token or add a context for it with: byoc context add NAME --server %s --token TOKEN", t.server, t.server)}
	}
	return t, nil
}

// sameServer reports whether two server URLs name the same server: the
// same scheme, host and port (written or implied by the scheme; any
// loopback name or address is one host) and path, whatever the case of
// the scheme and host and a trailing slash. A token is only ever sent to
// its own context's server, so this errs on the side of "different".
func sameServer(a, b string) bool {
	ua, err1 := url.Parse(strings.TrimRight(a, "/"))
	ub, err2 := url.Parse(strings.TrimRight(b, "/"))
	if err1 != nil || err2 != nil {
		return false
	}
	key := func(u *url.URL) string {
		scheme := strings.ToLower(u.Scheme)
		host, port := strings.ToLower(u.Hostname()), u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[scheme]
		}
		if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
			host = "loopback"
		}
		return scheme + "://" + net.JoinHostPort(host, port) + u.EscapedPath()
	}
	return ua.User == nil && ub.User == nil && key(ua) == key(ub)
}

// client is an OperatorService client bound to one target.
type client struct {
	imsv1connect.OperatorServiceClient
	target *target
}

// connect resolves the target and returns a client for it.
func (a *app) connect() (*client, error) {
	return a.connectWith(newHTTPClient())
}

// connectStreams is connect for a bidirectional stream (byoc support
// shell): HTTP/2 only, unencrypted for http:// URLs (HTTP/1.1 cannot
// carry one).
func (a *app) connectStreams() (*client, error) {
	hc := newHTTPClient()
	var p http.Protocols
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	hc.Transport.(*http.Transport).Protocols = &p
	return a.connectWith(hc)
}

func (a *app) connectWith(hc *http.Client) (*client, error) {
	t, err := a.resolveTarget()
	if err != nil {
		return nil, err
	}
	return &client{
		OperatorServiceClient: imsv1connect.NewOperatorServiceClient(
			hc,
			strings.TrimRight(t.server, "/"),
			connect.WithInterceptors(bearer(t.token)),
		),
		target: t,
	}, nil
}

// newHTTPClient returns an HTTP client for imsd: HTTP/1.1 and HTTP/2 over
// TLS for https:// URLs, and HTTP/1.1 or unencrypted HTTP/2 for http://
// ones. It has no overall timeout, since log streams last as long as a job.
func newHTTPClient() *http.Client {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{
		Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout: 10 * time.Second,
			IdleConnTimeout:     90 * time.Second,
			Protocols:           &p,
		},
	}
}

// bearer returns an interceptor that presents token on every call.
func bearer(token string) connect.Interceptor {
	return &bearerInterceptor{header: "Bearer " + token}
}

type bearerInterceptor struct{ header string }

func (b *bearerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", b.header)
		return next(ctx, req)
	}
}

func (b *bearerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", b.header)
		return conn
	}
}

func (b *bearerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// rpcError wraps an error from a call with the target it was sent to, so
// that the message can say which server failed and how to fix it.
type rpcError struct {
	target *target
	err    error
	// flags names, by request field, the flag that set it, so that the
	// server's message names what the user typed (withFlags).
	flags []fieldFlag
	// hint, if set, is a line printed after the server's message: what
	// the user may have meant (notAJob).
	hint string
}

// fieldFlag is a request field and the flag a command sets it from.
type fieldFlag struct{ field, flag string }

// withFlags makes the error of a call (from wrap) name flags where the
// server's message names the request fields they set: "set_inputs: input
// "size" is a number" becomes "--input: input "size" is a number".
func withFlags(err error, flags ...fieldFlag) error {
	var re *rpcError
	if errors.As(err, &re) {
		re.flags = append(re.flags, flags...)
	}
	return err
}

// notAJob adds to a job command's "job not found" what to run when arg is
// not a job id at all: people type the install's name (byoc job logs
// demo), which byoc logs and job list --install take.
func notAJob(err error, arg string) error {
	var re *rpcError
	if errors.As(err, &re) && connect.CodeOf(err) == connect.CodeNotFound && !strings.HasPrefix(arg, "job_") {
		re.hint = fmt.Sprintf("Job ids start with job_. For an install's jobs: byoc logs %s (its latest logs), byoc job list --install %[1]s.", shellQuote(arg))
	}
	return err
}

// flagNames rewrites the request fields msg names as their flags: FIELD
// and FIELD[N] become FLAG, FIELD[KEY] becomes "FLAG KEY". A field name
// that is a plain word ("inputs") is rewritten only where it leads the
// message as the field in error, not in the prose after it.
func flagNames(msg string, flags []fieldFlag) string {
	for _, f := range flags {
		q := regexp.QuoteMeta(f.field)
		if !strings.Contains(f.field, "_") {
			msg = regexp.MustCompile(`^`+q+`\[\d+\]:`).ReplaceAllLiteralString(msg, f.flag+":")
			msg = regexp.MustCompile(`^`+q+`\[([^\]]+)\]:`).ReplaceAllString(msg, f.flag+" $1:")
			msg = regexp.MustCompile(`^`+q+`:`).ReplaceAllLiteralString(msg, f.flag+":")
			continue
		}
		msg = regexp.MustCompile(`\b`+q+`\[\d+\]`).ReplaceAllLiteralString(msg, f.flag)
		msg = regexp.MustCompile(`\b`+q+`\[([^\]]+)\]`).ReplaceAllString(msg, f.flag+" $1")
		msg = regexp.MustCompile(`\b`+q+`\b`).ReplaceAllLiteralString(msg, f.flag)
	}
	// "--input: inputs.size: …" (a field's message naming its own path)
	// reads "--input size: …".
	return flagPath.ReplaceAllString(msg, "$1$2 $3: ")
}

var flagPath = regexp.MustCompile(`(^|\s)(--[a-z-]+): [a-z_]+\.([A-Za-z0-9_]+): `)

func (e *rpcError) Error() string { return e.err.Error() }
func (e *rpcError) Unwrap() error { return e.err }

// wrap annotates a call's error with the client's target.
func (c *client) wrap(err error) error {
	if err == nil {
		return nil
	}
	return &rpcError{target: c.target, err: err}
}

// describe turns an error into the message printed after "error: ". Connect
// errors show the server's message (which names the offending field);
// failures to reach the server name the server and suggest a fix.
func (a *app) describe(err error) string {
	var re *rpcError
	if !errors.As(err, &re) {
		return err.Error()
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err.Error()
	}
	where := re.target.server
	if re.target.context != "" {
		where = fmt.Sprintf("%s (context %q)", re.target.server, re.target.context)
	}
	msg := flagNames(ce.Message(), re.flags)
	if msg == "" {
		msg = ce.Code().String()
	}
	if re.hint != "" {
		msg += "\n" + re.hint
	}
	var ne net.Error
	switch ce.Code() {
	case connect.CodeUnavailable:
		if errors.As(err, &ne) || strings.Contains(msg, "dial") {
			return fmt.Sprintf("cannot reach the byoc server at %s: %s\nCheck the server URL with: byoc context list", where, msg)
		}
		return fmt.Sprintf("server %s is unavailable: %s", where, msg)
	case connect.CodeUnauthenticated:
		return fmt.Sprintf("%s\nThe server %s did not accept the token; replace it with: byoc context add NAME --server %s --token TOKEN", msg, where, re.target.server)
	case connect.CodeDeadlineExceeded:
		return fmt.Sprintf("request to %s timed out: %s", where, msg)
	}
	return msg
}
