// Package cluster starts real byoc parts for end-to-end tests and
// benchmarks: imsd in-process on a loopback port with a temporary data
// directory, and agentd as a real process built from this repository. It
// also gives typed clients, the real byoc CLI (NewCLI, PushApp), and small
// wait helpers that poll with a deadline instead of sleeping. A package
// using it runs its tests through Main, which removes the built binaries.
package cluster

import (
	"context"
	"fmt"
	"github.com/byoc-dev/byoc/internal/syncbuf"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/imsd/server"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// The binaries built for the test binary: one build per process, removed
// by Main when the tests end. Test helpers are the one place where this
// package-level state is worth it (one build of ~70 MB per test binary).
var (
	mainMu     sync.Mutex
	mainActive bool
	buildOnce  sync.Once
	binDir     string
	buildErr   error
)

// RepoRoot returns the repository root, found from this source file.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Main runs the tests of a package that uses this package, then removes
// the binaries Binaries built and checks that no goroutine outlived the
// tests (goleak; opts add goroutines to ignore). Call it from TestMain:
//
//	func TestMain(m *testing.M) { cluster.Main(m) }
//
// A test binary that StartBalancerProcesses runs again is a balancer
// process: Main runs the balancer instead of the tests.
func Main(m *testing.M, opts ...goleak.Option) {
	if os.Getenv(balancerEnv) != "" {
		os.Exit(runBalancerProcess())
	}
	mainMu.Lock()
	mainActive = true
	mainMu.Unlock()
	opts = append(opts, goleak.Cleanup(func(code int) {
		removeBinaries()
		os.Exit(code)
	}))
	goleak.VerifyTestMain(m, opts...)
}

func removeBinaries() {
	mainMu.Lock()
	defer mainMu.Unlock()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}

// Binaries builds agentd, byoc-plugins, byoc and imsd once per test
// binary, in one go build, and returns the directory holding them. The test binary must run
// its tests through Main, which removes them at the end.
func Binaries(tb testing.TB) string {
	tb.Helper()
	mainMu.Lock()
	active := mainActive
	mainMu.Unlock()
	if !active {
		tb.Fatal("cluster.Binaries: call cluster.Main from the package's TestMain, so the built binaries are removed when the tests end")
	}
	buildOnce.Do(func() {
		mainMu.Lock()
		defer mainMu.Unlock()
		binDir, buildErr = os.MkdirTemp("", "byoc-bin-")
		if buildErr != nil {
			return
		}
		// One build of the four mains shares the work of their common
		// packages; -o DIR/ names each binary after its directory, so
		// byoc-plugins (the heavy built-in types) lands beside agentd,
		// where agentd looks for it, as an install has it.
		// Stamped as the Makefile's build stamps them, with BuildVersion.
		bi := "github.com/byoc-dev/byoc/internal/buildinfo"
		ldflags := fmt.Sprintf("-X %s.version=%s -X %s.commit=%s -X %s.date=%s", bi, BuildVersion, bi, BuildCommit, bi, BuildDate)
		cmd := exec.Command("go", "build", "-ldflags", ldflags, "-o", binDir+string(filepath.Separator), "./agentd", "./plugins/bundle/byoc-plugins", "./tui", "./imsd")
		cmd.Dir = RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		buildErr = os.Rename(filepath.Join(binDir, "tui"), filepath.Join(binDir, "byoc"))
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return binDir
}

// The version, commit and date Binaries stamps into the binaries it
// builds (what --version prints and agentd reports).
const (
	BuildVersion = "v0.0.0-e2e"
	BuildCommit  = "e2e0c0ffee00"
	BuildDate    = "2026-01-02T03:04:05Z"
)

// IMS is an imsd started by a test.
type IMS struct {
	*server.Server
	DataDir    string
	AdminToken string
	cfg        server.Config
	done       chan error
	cancel     context.CancelFunc
}

// Options tune StartIMS.
type Options struct {
	DataDir           string // default: a new temp dir
	DatabaseURL       string
	Addr              string // default 127.0.0.1:0
	LeaseDuration     time.Duration
	HeartbeatInterval time.Duration
	SweepInterval     time.Duration
	WorkflowInterval  time.Duration
	// CronInterval and CronNow are the action scheduler's interval and
	// clock (default: the server's).
	CronInterval time.Duration
	CronNow      func() time.Time
	// ReleaseInterval and ReleaseNow are the release engine's interval
	// and clock (default: the server's).
	ReleaseInterval time.Duration
	ReleaseNow      func() time.Time
	Logger          *slog.Logger
	Now             func() time.Time
	// AgentWireOff is imsd --agentwire=off.
	AgentWireOff bool
	// SigningKeyFile is imsd --signing-key (default: DATA-DIR/signing.key).
	SigningKeyFile string
	// BreakGlassRequestTTL is imsd's --break-glass-request-ttl.
	BreakGlassRequestTTL time.Duration
	// RegistryURL is imsd's --registry-url (the vendor registry).
	RegistryURL string
	// SSOConfigFile is imsd's --sso-config.
	SSOConfigFile string
	// AgentOfflineAfter, AgentHealthGrace, AlertDelay, AlertDedup,
	// AlertWebhookURL and AlertWebhookSecretFile are imsd's flags of the
	// same names; HealthInterval and AlertRetryMin its health sweep's
	// interval and first retry delay.
	AgentOfflineAfter, AgentHealthGrace, AlertDelay, AlertDedup time.Duration
	AlertWebhookURL, AlertWebhookSecretFile                     string
	HealthInterval, AlertRetryMin                               time.Duration
	// Version is imsd's version for the agent version-skew window
	// (default: this build's).
	Version string
}

// StartIMS starts imsd and stops it at cleanup.
func StartIMS(tb testing.TB, o Options) *IMS {
	tb.Helper()
	if o.DataDir == "" {
		o.DataDir = tb.TempDir()
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	if o.Logger == nil {
		// Set BYOC_TEST_LOG=1 to see imsd's log while debugging a test.
		var w io.Writer = io.Discard
		if os.Getenv("BYOC_TEST_LOG") != "" {
			w = os.Stderr
		}
		o.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	cfg := server.Config{
		Addr: o.Addr, DataDir: o.DataDir, DatabaseURL: o.DatabaseURL,
		LeaseDuration: o.LeaseDuration, HeartbeatInterval: o.HeartbeatInterval, SweepInterval: o.SweepInterval,
		WorkflowInterval: o.WorkflowInterval, Logger: o.Logger, Now: o.Now,
		CronInterval: o.CronInterval, CronNow: o.CronNow, AgentWireOff: o.AgentWireOff,
		ReleaseInterval: o.ReleaseInterval, ReleaseNow: o.ReleaseNow,
		SigningKeyFile:       o.SigningKeyFile,
		Version:              o.Version,
		BreakGlassRequestTTL: o.BreakGlassRequestTTL,
		RegistryURL:          o.RegistryURL,
		SSOConfigFile:        o.SSOConfigFile,
		AgentOfflineAfter:    o.AgentOfflineAfter, AgentHealthGrace: o.AgentHealthGrace,
		AlertDelay: o.AlertDelay, AlertDedup: o.AlertDedup,
		AlertWebhookURL: o.AlertWebhookURL, AlertWebhookSecretFile: o.AlertWebhookSecretFile,
		HealthInterval: o.HealthInterval, AlertRetryMin: o.AlertRetryMin,
	}
	ims := &IMS{DataDir: o.DataDir, cfg: cfg}
	ims.start(tb)
	tb.Cleanup(ims.Stop)
	return ims
}

func (ims *IMS) start(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var srv *server.Server
	var err error
	// The port of a restarted imsd may still be held by the kernel for a moment.
	deadline := time.Now().Add(10 * time.Second)
	for {
		srv, err = server.New(ctx, ims.cfg)
		if err == nil || time.Now().After(deadline) || !strings.Contains(err.Error(), "address already in use") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		cancel()
		tb.Fatalf("start imsd: %v", err)
	}
	ims.Server, ims.cancel, ims.done = srv, cancel, make(chan error, 1)
	ims.cfg.Addr = srv.Addr() // a restart comes back on the same port
	go func() { ims.done <- srv.Serve(ctx) }()
	if ims.AdminToken == "" {
		b, err := os.ReadFile(filepath.Join(ims.DataDir, "admin.token"))
		if err != nil {
			tb.Fatalf("read admin token: %v", err)
		}
		ims.AdminToken = strings.TrimSpace(string(b))
	}
}

// Stop stops imsd and waits for it.
func (ims *IMS) Stop() {
	if ims.cancel == nil {
		return
	}
	ims.cancel()
	<-ims.done
	ims.cancel = nil
}

// Restart stops imsd and starts it again on the same address and data.
func (ims *IMS) Restart(tb testing.TB) {
	tb.Helper()
	ims.Stop()
	ims.start(tb)
}

// Client returns an operator client using token.
func (ims *IMS) Client(token string) imsv1connect.OperatorServiceClient {
	return imsv1connect.NewOperatorServiceClient(agent.DefaultHTTPClient(), ims.URL(), connect.WithInterceptors(bearer(token)))
}

// Admin returns an operator client with the first admin token.
func (ims *IMS) Admin() imsv1connect.OperatorServiceClient { return ims.Client(ims.AdminToken) }

type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		c := next(ctx, spec)
		c.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return c
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// Bearer returns a client interceptor that sends token.
func Bearer(token string) connect.Interceptor { return bearer(token) }

// NewInstall creates an app (once) and an install and returns the install
// and its enrolment token.
func NewInstall(tb testing.TB, c imsv1connect.OperatorServiceClient, app, name string) (*imsv1.Install, string) {
	tb.Helper()
	ctx := context.Background()
	if _, err := c.GetApp(ctx, connect.NewRequest(&imsv1.GetAppRequest{IdOrName: app})); err != nil {
		if _, err := c.CreateApp(ctx, connect.NewRequest(&imsv1.CreateAppRequest{Name: app})); err != nil {
			tb.Fatalf("create app: %v", err)
		}
	}
	resp, err := c.CreateInstall(ctx, connect.NewRequest(&imsv1.CreateInstallRequest{App: app, Name: name}))
	if err != nil {
		tb.Fatalf("create install: %v", err)
	}
	return resp.Msg.Install, resp.Msg.EnrollmentToken.Token
}

// AgentProc is an agentd process.
type AgentProc struct {
	Cmd      *exec.Cmd
	StateDir string
	out      *syncbuf.Buffer
	done     chan struct{}
}

// StartAgent runs agentd against url. token may be empty when stateDir
// already holds an identity.
func StartAgent(tb testing.TB, url, token, stateDir string, extra ...string) *AgentProc {
	tb.Helper()
	return StartAgentEnv(tb, nil, url, token, stateDir, extra...)
}

// StartAgentEnv is StartAgent with env (KEY=VALUE) added to agentd's
// environment.
func StartAgentEnv(tb testing.TB, env []string, url, token, stateDir string, extra ...string) *AgentProc {
	tb.Helper()
	return StartAgentBin(tb, filepath.Join(Binaries(tb), "agentd"), env, url, token, stateDir, extra...)
}

// StartAgentBin is StartAgentEnv running the agentd at bin, such as a
// copy the test owns (an agent that updates itself swaps it).
func StartAgentBin(tb testing.TB, bin string, env []string, url, token, stateDir string, extra ...string) *AgentProc {
	tb.Helper()
	args := append([]string{"--ims", url, "--state-dir", stateDir, "--log-level", "debug"}, extra...)
	// The test's registries are on this machine's loopback, which the
	// plugins' sandbox reaches only where the customer says so.
	for _, h := range ocitest.Hosts() {
		args = append(args, "--insecure-sandbox-egress-allow", h)
	}
	if token != "" {
		args = append(args, "--enroll-token", token)
	}
	cmd := exec.Command(bin, args...)
	dieWithTest(cmd)
	buf := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = buf, buf
	cmd.Env = append(append(os.Environ(), "AWS_SECRET_ACCESS_KEY=agent-secret-must-not-leak"), env...)
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start agentd: %v", err)
	}
	p := &AgentProc{Cmd: cmd, StateDir: stateDir, out: buf, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	tb.Cleanup(func() {
		p.Stop()
		if tb.Failed() {
			tb.Logf("agentd output:\n%s", buf.String())
		}
	})
	return p
}

// Kill kills the agent process with SIGKILL, as a crash would.
func (p *AgentProc) Kill() {
	p.Cmd.Process.Kill()
	<-p.done
}

// Stop asks the agent to stop and waits.
func (p *AgentProc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.Kill()
	}
}

// Exited reports whether the agent process has exited.
func (p *AgentProc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Output is what the agent printed so far.
func (p *AgentProc) Output() string { return p.out.String() }

// Eventually polls cond every 10ms until it returns true or timeout passes.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WaitJob polls until the job is in one of states and returns it.
func WaitJob(tb testing.TB, c imsv1connect.OperatorServiceClient, id string, timeout time.Duration, states ...imsv1.JobState) *imsv1.Job {
	tb.Helper()
	var job *imsv1.Job
	Eventually(tb, timeout, fmt.Sprintf("job %s to reach %v", id, states), func() bool {
		r, err := c.GetJob(context.Background(), connect.NewRequest(&imsv1.GetJobRequest{Id: id}))
		if err != nil {
			return false
		}
		job = r.Msg.Job
		for _, s := range states {
			if job.State == s {
				return true
			}
		}
		return false
	})
	return job
}

// Logs reads a job's whole log (not following).
func Logs(tb testing.TB, c imsv1connect.OperatorServiceClient, id string) []*imsv1.LogLine {
	tb.Helper()
	st, err := c.StreamJobLogs(context.Background(), connect.NewRequest(&imsv1.StreamJobLogsRequest{JobId: id}))
	if err != nil {
		tb.Fatalf("stream logs: %v", err)
	}
	var out []*imsv1.LogLine
	for st.Receive() {
		out = append(out, st.Msg().Lines...)
	}
	if err := st.Err(); err != nil {
		tb.Fatalf("stream logs: %v", err)
	}
	return out
}

// Texts returns the text of the stdout and stderr lines.
func Texts(lines []*imsv1.LogLine) []string {
	var out []string
	for _, l := range lines {
		if l.Stream != imsv1.LogStream_LOG_STREAM_SYSTEM {
			out = append(out, l.Text)
		}
	}
	return out
}
