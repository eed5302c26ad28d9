// Package server assembles imsd: it opens the store, mounts the operator and
// agent APIs (Connect, gRPC and gRPC-Web on one HTTP/2 port), health,
// readiness and Prometheus endpoints, and runs the lease sweeper. A whole
// imsd can be started from a test on port 0 with a temporary directory.
package server

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/byoc-dev/byoc/imsd/agentapi"
	"github.com/byoc-dev/byoc/imsd/agentwire"
	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/dispatch"
	"github.com/byoc-dev/byoc/imsd/health"
	"github.com/byoc-dev/byoc/imsd/operatorapi"
	"github.com/byoc-dev/byoc/imsd/registry"
	"github.com/byoc-dev/byoc/imsd/release"
	"github.com/byoc-dev/byoc/imsd/schedule"
	"github.com/byoc-dev/byoc/imsd/sso"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/telemetry"
	"github.com/byoc-dev/byoc/imsd/workflow"
	"github.com/byoc-dev/byoc/internal/atomicfile"
	"github.com/byoc-dev/byoc/internal/buildinfo"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1/agentv1connect"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// Config is everything imsd needs to start.
type Config struct {
	// Addr is the listen address; ":0" picks a free port.
	Addr string
	// DataDir holds the SQLite database and the first admin token.
	DataDir string
	// DatabaseURL selects PostgreSQL (postgres://...) instead of SQLite.
	DatabaseURL string
	// AdminTokenFile is where the first start writes the admin token;
	// default DataDir/admin.token.
	AdminTokenFile string
	// SigningKeyFile is imsd's job signing key (PKCS#8 PEM, Ed25519);
	// default DataDir/signing.key, created at the first start. Required
	// with PostgreSQL and no DataDir; every replica needs the same key.
	SigningKeyFile string
	// TLSCertFile and TLSKeyFile serve HTTPS instead of plaintext HTTP/2.
	TLSCertFile, TLSKeyFile string
	// DebugAddr, when set, serves /debug/pprof on its own listener, kept
	// off the API port.
	DebugAddr string
	// AgentWireOff sends every plaintext connection to the standard
	// HTTP/2 and Connect stack, agent streams included (imsd
	// --agentwire=off): an escape hatch should agentwire misbehave, at
	// the standard stack's memory per agent.
	AgentWireOff bool

	LeaseDuration time.Duration // default 30s
	// LeaseGrace is how long past a lease's end imsd still waits before
	// handing the job out again (default 5s + a tenth of the lease): the
	// agent stops the job itself when a lease passed without a confirmed
	// renewal, and the grace covers a clock running slower on the agent
	// and the time its plugin takes to die (see agentd/agent/lease.go).
	LeaseGrace        time.Duration
	HeartbeatInterval time.Duration // default 10s
	SweepInterval     time.Duration // default 1s
	// WorkflowInterval is how often every unfinished workflow is looked at
	// without a signal (default 2s): what resumes workflows after a
	// restart and picks up other replicas' changes.
	WorkflowInterval time.Duration
	// MaxHellos bounds the agent hellos served at once; beyond it a
	// stream is shed with a retry hint (agentapi/admission.go; default
	// agentapi.DefaultMaxHellos).
	MaxHellos int
	// CronInterval is how often the cron triggers of actions are evaluated
	// (default 10s): a tick fires up to this long after its time.
	CronInterval time.Duration
	// CronNow is the scheduler's clock (default Now); tests set it to run
	// through schedule ticks without waiting for them.
	CronNow func() time.Time
	// ReleaseInterval is how often every unfinished release is looked at
	// without a signal (default 2s): windows opening, pauses between
	// waves ending, other replicas' changes.
	ReleaseInterval time.Duration
	// ReleaseNow is the release engine's clock (default Now): maintenance
	// windows and pauses between waves; tests set it to open windows
	// without waiting for them.
	ReleaseNow func() time.Time
	// BreakGlassRequestTTL is how long a break-glass request waits for
	// the customer's decision before it expires (default 30m).
	BreakGlassRequestTTL time.Duration
	// RegistryURL is the vendor registry as agents reach it
	// (http://HOST:PORT): image and build jobs then carry one-time grants
	// for it, exchanged at /v2/token. Empty: no grants.
	RegistryURL string
	// RegistryService is the registry's auth.token.service (default
	// byoc-registry).
	RegistryService string
	// RegistryKeyDir holds the registry token key and certificate
	// (registry-token.key, registry-token.crt; the certificate is the
	// registry's rootcertbundle), created at the first start; default
	// DataDir.
	RegistryKeyDir string
	// SSOConfigFile is the single sign-on config (sso.Config, TOML);
	// empty: no single sign-on, API tokens only.
	SSOConfigFile string

	// AgentOfflineAfter: an agent imsd has not heard for this long is
	// offline (default 2m; longer than a lease and two heartbeats).
	AgentOfflineAfter time.Duration
	// AgentHealthGrace is how long after its enrolment and after each
	// reconnection an agent is not counted degraded (default 2m).
	AgentHealthGrace time.Duration
	// AlertDelay is how long a health must hold before it is alerted
	// (default 1m); AlertDedup the de-duplication window (default 1h).
	AlertDelay, AlertDedup time.Duration
	// AlertWebhookURL receives alerts as JSON signed with the secret in
	// AlertWebhookSecretFile (HMAC-SHA256, header Byoc-Signature).
	AlertWebhookURL, AlertWebhookSecretFile string
	// AlertSlackURLFile holds a Slack-compatible incoming webhook URL.
	AlertSlackURLFile string
	// Version is imsd's version for the agent version-skew window
	// (default: this build's, buildinfo).
	Version string
	// HealthInterval is how often agents' health is swept and due alerts
	// sent (default 5s); AlertRetryMin the first retry's delay (default 2s).
	HealthInterval, AlertRetryMin time.Duration

	// JobLogMaxLines and JobLogMaxBytes cap each job's stored log, its
	// attempts together (default store.DefaultLogMaxLines, 100,000, and
	// store.DefaultLogMaxBytes, 64 MiB): past them a job's lines are
	// dropped and counted on one marker line.
	JobLogMaxLines, JobLogMaxBytes int64
	// JobLogRetention, when set, removes the log lines of jobs that ended
	// longer ago than this (default 0: keep them); the job rows, results
	// and audit chain stay. JobLogPruneInterval is how often the pruner
	// looks for such jobs (default 1m).
	JobLogRetention, JobLogPruneInterval time.Duration
	// SupportSessionLostAfter: a support session whose end is not
	// recorded, and whose agent imsd has not heard for this long, is
	// ended by imsd with a support.session.ended record saying the agent
	// was lost (default 15m, or twice a lease and two heartbeats if
	// longer; it must be longer than those).
	SupportSessionLostAfter time.Duration

	Logger *slog.Logger
	Now    func() time.Time
}

// lateAfter is how stale a connected agent's stored last-seen time may
// be: imsd writes it once per lease, on a heartbeat.
func (c *Config) lateAfter() time.Duration { return c.LeaseDuration + 2*c.HeartbeatInterval }

func (c *Config) defaults() error {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:7070"
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = 30 * time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 10 * time.Second
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = time.Second
	}
	if c.LeaseGrace == 0 {
		c.LeaseGrace = DefaultLeaseGrace(c.LeaseDuration)
	}
	if c.LeaseGrace < MinLeaseGrace {
		return fmt.Errorf("lease grace %s is shorter than %s: an agent needs that long to stop a job whose lease ran out", c.LeaseGrace, MinLeaseGrace)
	}
	if c.HeartbeatInterval >= c.LeaseDuration {
		return fmt.Errorf("heartbeat interval %s must be shorter than the lease duration %s", c.HeartbeatInterval, c.LeaseDuration)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.ReleaseNow == nil {
		c.ReleaseNow = c.Now
	}
	if c.CronNow == nil {
		c.CronNow = c.Now
	}
	if c.DatabaseURL == "" && c.DataDir == "" {
		return errors.New("set a data directory (--data-dir) for SQLite or a PostgreSQL URL (--database-url)")
	}
	if c.SigningKeyFile == "" && c.DataDir == "" {
		return errors.New("--signing-key is required with PostgreSQL and no --data-dir: give every replica the same job signing key file")
	}
	if c.AdminTokenFile == "" && c.DataDir != "" {
		c.AdminTokenFile = filepath.Join(c.DataDir, "admin.token")
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if c.AgentOfflineAfter == 0 {
		c.AgentOfflineAfter = max(2*time.Minute, 2*c.lateAfter())
	}
	if c.AgentOfflineAfter <= c.lateAfter() {
		return fmt.Errorf("--agent-offline-after %s must be longer than a lease and two heartbeats (%s): imsd records a connected agent's last heartbeat once per lease",
			c.AgentOfflineAfter, c.lateAfter())
	}
	if c.AgentHealthGrace == 0 {
		c.AgentHealthGrace = 2 * time.Minute
	}
	if c.AlertDelay == 0 {
		c.AlertDelay = time.Minute
	}
	if c.AlertDedup == 0 {
		c.AlertDedup = time.Hour
	}
	if (c.AlertWebhookURL == "") != (c.AlertWebhookSecretFile == "") {
		return errors.New("--alert-webhook and --alert-webhook-secret-file go together")
	}
	switch {
	case c.JobLogMaxLines < 0:
		return fmt.Errorf("--job-log-max-lines %d: want at least 1 (0 means the default, %d)", c.JobLogMaxLines, store.DefaultLogMaxLines)
	case c.JobLogMaxBytes < 0:
		return fmt.Errorf("--job-log-max-bytes %d: want at least 1 (0 means the default, %d)", c.JobLogMaxBytes, store.DefaultLogMaxBytes)
	case c.JobLogRetention < 0:
		return fmt.Errorf("--job-log-retention %s: want a positive duration, or 0 to keep job logs", c.JobLogRetention)
	}
	if c.JobLogPruneInterval <= 0 {
		c.JobLogPruneInterval = time.Minute
	}
	if c.SupportSessionLostAfter == 0 {
		c.SupportSessionLostAfter = max(15*time.Minute, 2*c.lateAfter())
	}
	if c.SupportSessionLostAfter <= c.lateAfter() {
		return fmt.Errorf("--support-session-lost-after %s must be longer than a lease and two heartbeats (%s): imsd records a connected agent's last heartbeat once per lease",
			c.SupportSessionLostAfter, c.lateAfter())
	}
	return nil
}

// alertSinks reads the configured alert sinks.
func alertSinks(c Config) ([]health.Sink, error) {
	var sinks []health.Sink
	client := &http.Client{Timeout: 10 * time.Second}
	if c.AlertWebhookURL != "" {
		if u, err := url.Parse(c.AlertWebhookURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--alert-webhook %q: want an http:// or https:// URL", c.AlertWebhookURL)
		}
		secret, err := os.ReadFile(c.AlertWebhookSecretFile)
		if err != nil {
			return nil, fmt.Errorf("--alert-webhook-secret-file: %w", err)
		}
		secret = bytes.TrimSpace(secret)
		if len(secret) < 16 {
			return nil, fmt.Errorf("--alert-webhook-secret-file %s: the secret is %d bytes; want at least 16", c.AlertWebhookSecretFile, len(secret))
		}
		sinks = append(sinks, &health.Webhook{URL: c.AlertWebhookURL, Secret: secret, Client: client})
	}
	if c.AlertSlackURLFile != "" {
		b, err := os.ReadFile(c.AlertSlackURLFile)
		if err != nil {
			return nil, fmt.Errorf("--alert-slack-webhook-file: %w", err)
		}
		raw := string(bytes.TrimSpace(b))
		if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--alert-slack-webhook-file %s: want one http:// or https:// URL in it", c.AlertSlackURLFile)
		}
		sinks = append(sinks, &health.Slack{URL: raw, Client: client})
	}
	return sinks, nil
}

// MinLeaseGrace is the shortest --lease-grace: an agent's check of its
// leases (a quarter second at most), SIGTERM, two seconds, SIGKILL, and
// a second to spare.
const MinLeaseGrace = 4 * time.Second

// DefaultLeaseGrace is the grace for a lease of d: five seconds for the
// agent to stop the job, and a tenth of the lease for clocks whose rates
// differ (far more than any clock drifts).
func DefaultLeaseGrace(d time.Duration) time.Duration { return 5*time.Second + d/10 }

// agentHelloMax bounds what an agent stream may send before its hello is
// verified: on agentwire the first message, after decompression too; on
// the standard stack the request body's bytes (agentapi.KeepBody; gzip
// there is bounded by the read limit). The largest hello an agent sends
// (1,000 running jobs, a 255-byte host name) is about 44 KB
// (TestLargestHelloFits).
const agentHelloMax = 64 << 10

// Server is a running imsd.
type Server struct {
	cfg Config
	// version is imsd's version, for the agent versions it serves.
	version string
	// sso verifies single sign-on ID tokens (nil: off); login is what
	// byoc login reads.
	sso   *sso.Verifier
	login operatorapi.LoginConfig
	store *store.Store
	hub   *dispatch.Hub
	// key signs every job handed out; chain endorses it (its rotations).
	key     auth.SigningKey
	chain   []agentproto.Endorsement
	retired []agentproto.Retirement
	// previous are the keys key replaced (loadPreviousKeys), for the
	// results of offline bundles signed before a rotation; those past
	// their use hold no private key.
	previous []auth.PreviousKey
	// tokens signs registry tokens (nil: no token server).
	tokens *registry.Signer
	// engine runs workflows.
	engine *workflow.Engine
	// releases rolls releases out.
	releases *release.Engine
	// telemetry holds the app telemetry agents forward (in memory).
	telemetry *telemetry.Store
	// cron fires the cron triggers of actions.
	cron *schedule.Scheduler
	// health sweeps agents' health and sends alerts.
	health *health.Monitor
	// certs serves --tls-cert, reloaded when it changes (nil without TLS).
	certs *certReloader
	ln    net.Listener
	http  *http.Server
	// agentWire serves agent streams routed to it by the h2c listener
	// (nil with AgentWireOff).
	agentWire *agentwire.Server
	// agents serves the agent streams; Serve drains them before closing
	// the store, so each records its end.
	agents *agentapi.Service
	// logsPruned counts what the log pruner removed: lines, and jobs
	// whose log it removed to the end.
	logsPruned struct{ lines, jobs prometheus.Counter }
	// sniffPanics counts panics contained in the h2c listener's sniff;
	// testHookSniff is handed to it (tests make it panic).
	sniffPanics   atomic.Uint64
	testHookSniff func()
	reg           *prometheus.Registry
	log           *slog.Logger

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New opens the store (applying migrations), creates the first admin token
// if there is none, and binds the listen address. Call Serve to start.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	dsn := cfg.DatabaseURL
	if cfg.DataDir != "" {
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("create data dir: %w", err)
		}
	}
	if dsn == "" {
		dsn = filepath.Join(cfg.DataDir, "imsd.db")
	}
	key, chain, err := loadSigningKey(cfg)
	if err != nil {
		return nil, err
	}
	var (
		ssoV  *sso.Verifier
		login operatorapi.LoginConfig
	)
	if cfg.SSOConfigFile != "" {
		sc, err := sso.Load(cfg.SSOConfigFile)
		if err != nil {
			return nil, fmt.Errorf("--sso-config: %w", err)
		}
		if ssoV, err = sso.NewVerifier(sc, cfg.Now); err != nil {
			return nil, fmt.Errorf("--sso-config: %w", err)
		}
		login = operatorapi.LoginConfig{Issuer: sc.Issuer, ClientID: sc.ClientID, Scopes: sc.Scopes}
	}
	retired, err := auth.LoadRetirements(SigningKeyPath(cfg.DataDir, cfg.SigningKeyFile), key)
	if err != nil {
		return nil, err
	}
	previous, err := loadPreviousKeys(cfg, key, chain)
	if err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	st.SetLogLimits(store.LogLimits{Lines: cfg.JobLogMaxLines, Bytes: cfg.JobLogMaxBytes})
	s := &Server{cfg: cfg, store: st, hub: dispatch.NewHub(), key: key, chain: chain, retired: retired, previous: previous, log: cfg.Logger, sso: ssoV, login: login}
	s.forwardCancels()
	if dir := cmp.Or(cfg.RegistryKeyDir, cfg.DataDir); dir != "" {
		if s.tokens, err = registry.LoadOrCreateSigner(dir, cfg.RegistryService); err != nil {
			st.Close()
			return nil, err
		}
	} else if cfg.RegistryURL != "" {
		st.Close()
		return nil, errors.New("a registry URL needs a directory for the registry token key (--registry-key-dir or --data-dir)")
	}
	s.log.Info("job signing key", "key_id", key.ID)
	s.engine = workflow.NewEngine(st, s.hub, cfg.Now, s.log)
	if cfg.WorkflowInterval > 0 {
		s.engine.Interval = cfg.WorkflowInterval
	}
	s.releases = release.NewEngine(st, s.hub, s.engine, cfg.ReleaseNow, s.log)
	s.telemetry = telemetry.New(telemetry.Config{})
	if cfg.ReleaseInterval > 0 {
		s.releases.Interval = cfg.ReleaseInterval
	}
	s.cron = schedule.New(st, s.engine, cfg.CronNow, s.log)
	if cfg.CronInterval > 0 {
		s.cron.Interval = cfg.CronInterval
	}
	if cfg.TLSCertFile != "" {
		if s.certs, err = newCertReloader(cfg.TLSCertFile, cfg.TLSKeyFile, s.log); err != nil {
			st.Close()
			return nil, err
		}
	}
	sinks, err := alertSinks(cfg)
	if err != nil {
		st.Close()
		return nil, err
	}
	s.health = health.New(st, health.Config{
		OfflineAfter: cfg.AgentOfflineAfter, Grace: cfg.AgentHealthGrace,
		AlertDelay: cfg.AlertDelay, AlertDedup: cfg.AlertDedup, Interval: cfg.HealthInterval, RetryMin: cfg.AlertRetryMin,
		Sinks: sinks, OnChange: s.hub.FleetChanged, Now: cfg.Now, Log: s.log,
	})
	if err := s.bootstrap(ctx); err != nil {
		st.Close()
		return nil, err
	}
	s.ln, err = net.Listen("tcp", cfg.Addr)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	s.http = s.newHTTPServer()
	return s, nil
}

func registryConfig(cfg Config) *agentapi.RegistryConfig {
	if cfg.RegistryURL == "" {
		return nil
	}
	return &agentapi.RegistryConfig{URL: cfg.RegistryURL, Service: cfg.RegistryService}
}

// RegistryCertificate is the registry token certificate's PEM, for the
// registry's rootcertbundle (nil without a token server).
func (s *Server) RegistryCertificate() []byte {
	if s.tokens == nil {
		return nil
	}
	return s.tokens.CertificatePEM()
}

// loadSigningKey reads the job signing key: --signing-key's file, which
// must exist, or DATA-DIR/signing.key, created at the first start; and
// the chain of its rotations beside it (auth.LoadKeyChain).
func loadSigningKey(cfg Config) (auth.SigningKey, []agentproto.Endorsement, error) {
	path := SigningKeyPath(cfg.DataDir, cfg.SigningKeyFile)
	k, err := auth.LoadSigningKey(path, cfg.SigningKeyFile == "")
	if err != nil {
		if cfg.SigningKeyFile != "" {
			err = fmt.Errorf("--signing-key: %w", err)
		}
		return k, nil, err
	}
	chain, err := auth.LoadKeyChain(path, k)
	return k, chain, err
}

// loadPreviousKeys reads the keys the signing key replaced
// (auth.LoadPreviousKeys) and logs each: in use until when, or no longer
// used (replaced longer than auth.PreviousKeyUse ago: its private key is
// dropped here, and the next imsd key rotate removes it from the file).
// One whose replacement time is the file's modification time (written by
// an older imsd) is logged at WARN.
func loadPreviousKeys(cfg Config, key auth.SigningKey, chain []agentproto.Endorsement) ([]auth.PreviousKey, error) {
	path := SigningKeyPath(cfg.DataDir, cfg.SigningKeyFile)
	now := cfg.Now()
	prev, err := auth.LoadPreviousKeys(path, key, chain, now)
	if err != nil {
		return nil, err
	}
	for i, k := range prev {
		attrs := []any{"key", k.ID, "file", auth.PreviousFile(path), "entry", k.Entry,
			"replaced", k.ReplacedAt.UTC().Format(time.RFC3339), "used_until", k.UsableUntil().UTC().Format(time.RFC3339)}
		if k.FromModTime {
			cfg.Logger.Warn("a previous signing key has no Replaced-At (written by an older imsd): taken as replaced when the file was last written; imsd key rotate writes it", attrs...)
		}
		if k.UsableAt(now) {
			cfg.Logger.Info("a previous signing key opens the results of offline bundles it signed", attrs...)
			continue
		}
		prev[i].Private = nil
		cfg.Logger.Warn("a previous signing key was replaced longer ago than any of its bundles' results need: no longer used; imsd key rotate removes it from the file", attrs...)
	}
	return prev, nil
}

// SigningKeyPath is the signing key file imsd uses: keyFile if set, else
// the one in dataDir.
func SigningKeyPath(dataDir, keyFile string) string {
	if keyFile != "" {
		return keyFile
	}
	return filepath.Join(dataDir, SigningKeyFileName)
}

// SigningKeyFileName is the job signing key's file in the data dir.
const SigningKeyFileName = "signing.key"

// HealthSweeps reports how many health sweeps this imsd has ended, for
// tests that wait for one to have looked.
func (s *Server) HealthSweeps() uint64 { return s.health.Sweeps() }

// SigningKey returns imsd's job signing key.
func (s *Server) SigningKey() auth.SigningKey { return s.key }

// bootstrap creates the first admin token on an empty database.
func (s *Server) bootstrap(ctx context.Context) error {
	n, err := s.store.CountAPITokens(ctx)
	if err != nil {
		return fmt.Errorf("count api tokens: %w", err)
	}
	if n > 0 {
		return nil
	}
	secret, _, err := operatorapi.CreateToken(ctx, s.store, store.APIToken{Name: "admin", Role: store.RoleAdmin, CreatedBy: "imsd:first-start"}, s.cfg.Now())
	if err != nil {
		return err
	}
	if s.cfg.AdminTokenFile == "" {
		s.log.Warn("first start: created the admin API token; it is shown once", "token", secret)
		return nil
	}
	if err := atomicfile.Write(s.cfg.AdminTokenFile, []byte(secret+"\n"), 0o600); err != nil {
		return fmt.Errorf("write admin token: %w", err)
	}
	s.log.Info("first start: created the admin API token", "file", s.cfg.AdminTokenFile)
	return nil
}

func (s *Server) newHTTPServer() *http.Server {
	cfg := s.cfg
	s.reg = prometheus.NewRegistry()
	obs := newMetrics(s.reg, s.hub, func() uint64 {
		n := s.sniffPanics.Load()
		if s.agentWire != nil {
			n += s.agentWire.Panics()
		}
		return n
	})

	s.reg.MustRegister(&installMetrics{store: s.store, log: s.log, online: func(a store.Agent) bool {
		// As the operator API's online.
		return s.hub.Connected(a.ID) || a.StreamMayBeOpen(cfg.Now(), cfg.LeaseDuration+3*cfg.HeartbeatInterval)
	}})
	s.reg.MustRegister(s.health)
	s.logsPruned.lines = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "byoc_job_log_lines_pruned_total",
		Help: "Job log lines this imsd removed under --job-log-retention.",
	})
	s.logsPruned.jobs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "byoc_job_logs_pruned_total",
		Help: "Ended jobs this imsd's pruner went through under --job-log-retention: their log lines, if any, removed; their rows, results and audit events kept.",
	})
	s.reg.MustRegister(s.logsPruned.lines, s.logsPruned.jobs,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "byoc_job_log_lines_dropped_total",
			Help: "Job log lines this imsd acknowledged but did not store: past a job's cap (--job-log-max-lines, --job-log-max-bytes), and those of an imported results file's job log past a live log batch's bounds (1,000 lines, 4 MiB). Each job's log has a line saying which.",
		}, func() float64 { return float64(s.store.LogLinesDropped()) }))
	mux := http.NewServeMux()
	op := operatorapi.New(s.store, s.hub, operatorapi.Config{BreakGlassRequestTTL: cfg.BreakGlassRequestTTL, HeartbeatInterval: cfg.HeartbeatInterval, LeaseDuration: cfg.LeaseDuration, LeaseGrace: cfg.LeaseGrace, Engine: s.engine, Releases: s.releases, SigningKeyID: s.key.ID, SigningKey: s.key, SigningKeyFile: SigningKeyPath(cfg.DataDir, cfg.SigningKeyFile), PreviousSigningKeys: s.previous, RegistryURL: cfg.RegistryURL, RegistryTokens: s.tokens, Login: s.login, Telemetry: s.telemetry}, cfg.Now, s.log)
	var idv operatorapi.IDTokenVerifier
	if s.sso != nil {
		idv = s.sso
	}
	authn := operatorapi.NewAuthenticator(s.store, cfg.Now, idv, s.log)
	op.OnTokenRevoked(authn.Forget)
	opPath, opHandler := imsv1connect.NewOperatorServiceHandler(op,
		connect.WithInterceptors(authn, operatorapi.NewAuditor(s.store, cfg.Now)),
		connect.WithReadMaxBytes(4<<20),
		// Compressing small messages costs more CPU than it saves bytes.
		connect.WithCompressMinBytes(4<<10), fastGzip)
	// ReadDeadlines: UploadBundleResults bounds its wait for each part.
	mux.Handle(opPath, growStack(operatorapi.ReadDeadlines(opHandler)))
	// gRPC server reflection (v1 and the v1alpha that older grpcurl
	// asks for), so grpcurl and buf curl work without the proto files. It
	// describes the operator API only and asks for a token like it.
	reflector := grpcreflect.NewStaticReflector(imsv1connect.OperatorServiceName)
	mux.Handle(grpcreflect.NewHandlerV1(reflector, connect.WithInterceptors(authn)))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, connect.WithInterceptors(authn)))
	ag := agentapi.New(s.store, s.hub, agentapi.Config{
		LeaseDuration:     cfg.LeaseDuration,
		LeaseGrace:        cfg.LeaseGrace,
		HeartbeatInterval: cfg.HeartbeatInterval,
		HelloTimeout:      10 * time.Second,
		SigningKey:        s.key,
		KeyChain:          s.chain,
		Retired:           s.retired,
		Version:           cmp.Or(cfg.Version, buildinfo.Get().Short()),
		Registry:          registryConfig(cfg),
		MaxHellos:         cfg.MaxHellos,
		Telemetry:         s.telemetry,
		TelemetryConfig:   s.telemetryConfig,
		SensitiveEnv:      s.engine.Sensitive.Get,
	}, cfg.Now, s.log, obs)
	s.agents = ag
	s.version = cmp.Or(cfg.Version, buildinfo.Get().Short())
	s.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "byoc_agent_hellos_shed_total",
		Help: "Agent streams ended before their hello because imsd was serving --max-hellos hellos already (the agent retries after the hint it got).",
	}, func() float64 { return float64(ag.Shed()) }))
	if s.tokens != nil {
		// The vendor registry's token server (the Docker token
		// specification): agents exchange their grants here.
		mux.Handle("GET /v2/token", registry.Handler(s.tokens, ag, cfg.Now))
	}
	const agentReadMax, agentCompressMin = 16 << 20, 4 << 10

	agentPath, agentHandler := agentv1connect.NewAgentServiceHandler(ag, connect.WithReadMaxBytes(agentReadMax), connect.WithCompressMinBytes(agentCompressMin), fastGzip)
	// The agent stream over h2c in the Connect protocol (what agentd
	// speaks) is served by agentwire, on the connection's one goroutine;
	// see h2c.go.
	if !cfg.AgentWireOff {
		s.agentWire = &agentwire.Server{
			Handler:              func(ctx context.Context, st *agentwire.Stream) error { return ag.Serve(ctx, st) },
			ReadMaxBytes:         agentReadMax,
			FirstMessageMaxBytes: agentHelloMax,
			CompressMinBytes:     agentCompressMin,
			Log:                  s.log,
		}
	}
	mux.Handle(agentPath, agentapi.KeepBody(agentHandler, agentHelloMax))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.store.Ready(ctx); err != nil {
			http.Error(w, "database not reachable", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))

	// Plaintext HTTP/2 (h2c) never reaches this server's own connection
	// handling: Serve routes it to an h2cListener first.
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	return &http.Server{
		Handler:           mux,
		Protocols:         p,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: 1000,
			// Agents keep one idle stream open for days: probe dead peers.
			SendPingTimeout: 30 * time.Second,
			PingTimeout:     15 * time.Second,
		},
	}
}

// Addr is the bound listen address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is the base URL clients dial.
func (s *Server) URL() string {
	if s.cfg.TLSCertFile != "" {
		return "https://" + s.Addr()
	}
	return "http://" + s.Addr()
}

// Store returns the server's store, for tests and tools.
func (s *Server) Store() *store.Store { return s.store }

// AgentWireConns reports how many connections agentwire serves (0 with
// AgentWireOff), for tests.
func (s *Server) AgentWireConns() int {
	if s.agentWire == nil {
		return 0
	}
	return s.agentWire.Conns()
}

// Hub returns the server's dispatch hub, for tests and benchmarks.
func (s *Server) Hub() *dispatch.Hub { return s.hub }

// Serve runs until ctx ends or Close is called; it then drains and returns.
func (s *Server) Serve(ctx context.Context) error {
	ctx, s.cancel = context.WithCancel(ctx)
	// wg.Go, not Add(n): a loop added here is waited for without a count
	// to keep in step (two merges once left one out of Add).
	s.wg.Go(func() { s.sweep(ctx) })
	s.wg.Go(func() { s.health.Run(ctx) })
	s.wg.Go(func() { s.listenCancels(ctx) })
	s.wg.Go(func() { s.engine.Run(ctx) })
	s.wg.Go(func() { s.releases.Run(ctx) })
	s.wg.Go(func() { s.cron.Run(ctx) })
	if s.cfg.JobLogRetention > 0 {
		s.wg.Go(func() { s.pruneLogs(ctx) })
	}
	s.wg.Go(func() {
		if err := s.store.Listen(ctx, s.hub.Wake, s.hub.NotifyLog); err != nil && ctx.Err() == nil {
			s.log.Error("listen for wake-ups", "err", err)
		}
	})
	errc := make(chan error, 1)
	var h2c *h2cListener
	if s.cfg.TLSCertFile != "" {
		// The certificate is read again when its files change
		// (certReloader): a renewal needs no restart.
		s.http.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.certs.GetCertificate}
		go func() { errc <- s.http.ServeTLS(s.ln, "", "") }()
	} else {
		var err error
		if h2c, err = newH2CListener(s.ln, s.http, h2cOptions{agent: s.agentWire, panics: &s.sniffPanics, log: s.log, testHookSniff: s.testHookSniff}); err != nil {
			s.cancel()
			s.wg.Wait()
			s.store.Close()
			return fmt.Errorf("serve h2c: %w", err)
		}
		go func() { errc <- s.http.Serve(h2c) }()
	}
	if s.cfg.DebugAddr != "" {
		dbg := &http.Server{Addr: s.cfg.DebugAddr, Handler: pprofMux(), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := dbg.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("debug server", "err", err)
			}
		}()
		defer dbg.Close()
	}
	s.log.Info("imsd serving", "addr", s.Addr(), "database", s.store.Dialect(), "agent_versions", servedText(s.version))
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	// Agent streams never end on their own: give requests a moment, then
	// cut the rest. Agents reconnect and re-attach.
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if serr := s.http.Shutdown(sctx); serr != nil {
		s.http.Close()
	}
	if h2c != nil {
		h2c.closeConns(sctx)
	}
	s.cancel()
	s.wg.Wait()
	// The cut streams record their ends (other replicas then show those
	// agents gone at once, not after the last-seen window), each write
	// bounded.
	dctx, dcancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer dcancel()
	if !s.agents.Drain(dctx) {
		s.log.Warn("agent streams still ending at shutdown; their agents show connected until their last-seen is old")
	}
	if cerr := s.store.Close(); err == nil && !errors.Is(err, http.ErrServerClosed) {
		err = cerr
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Close stops a serving server.
func (s *Server) Close() {
	if s.cancel != nil {
		s.cancel()
	}
}

// sweep expires leases on a timer and wakes the agents that can take the
// requeued jobs. About once a minute it also deletes expired enqueue
// idempotency keys (which already count as unused; this bounds the table)
// and registry grants an hour past their expiry; every quarter of
// --support-session-lost-after (at most a minute) it ends the support
// sessions whose agent was lost.
func (s *Server) sweep(ctx context.Context) {
	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	var keysSwept, lostSwept time.Time
	lostEvery := min(time.Minute, max(s.cfg.SweepInterval, s.cfg.SupportSessionLostAfter/4))
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if now := s.cfg.Now(); now.Sub(lostSwept) >= lostEvery {
			lostSwept = now
			if _, err := s.agents.CloseLostSupportSessions(ctx, s.cfg.SupportSessionLostAfter); err != nil && ctx.Err() == nil {
				s.log.Error("end the support sessions of lost agents", "err", err)
			}
		}
		if now := s.cfg.Now(); now.Sub(keysSwept) >= time.Minute {
			keysSwept = now
			if n, err := s.store.DeleteExpiredEnqueueKeys(ctx, now); err != nil && ctx.Err() == nil {
				s.log.Error("delete expired enqueue keys", "err", err)
			} else if n > 0 {
				s.log.Debug("deleted expired enqueue keys", "count", n)
			}
			// Registry grants an hour past their expiry (the audit chain
			// keeps their story; an exchange then reads "unknown").
			if err := s.store.SweepRegistryGrants(ctx, now.Add(-time.Hour)); err != nil && ctx.Err() == nil {
				s.log.Error("delete expired registry grants", "err", err)
			}
		}
		changed, err := s.store.ExpireLeases(ctx, s.cfg.Now())
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("expire leases", "err", err)
			}
			continue
		}
		for _, c := range changed {
			s.log.Info("lease expired", "job", c.Job.ID, "attempt", c.Job.Attempt, "requeued", c.Requeued, "state", c.Job.State)
			if c.Requeued {
				s.hub.Wake(c.Job.InstallID)
			}
			s.hub.NotifyLog(c.Job.ID)
		}
		if len(changed) > 0 {
			s.hub.FleetChanged()
		}
	}
}

// pruneBatch is how many log lines one transaction of the pruner removes:
// about 10 ms of SQLite's one writer (measured on 2 busy cores,
// 80-byte lines), or of a PostgreSQL row lock.
const pruneBatch = 1000

// pruneGap is the pause between two of the pruner's batches, so that a
// backlog (the first start with a retention) leaves the writer to the
// agents' writes most of the time: 10 million lines take a few minutes.
const pruneGap = 20 * time.Millisecond

// pruneLogs removes the log lines of jobs that ended more than
// --job-log-retention ago, at the start and then every
// JobLogPruneInterval, a batch per transaction (pruneGap apart) until
// none is due. Every replica runs it; on PostgreSQL each batch takes a
// job the others do not hold.
func (s *Server) pruneLogs(ctx context.Context) {
	t := time.NewTicker(s.cfg.JobLogPruneInterval)
	defer t.Stop()
	for {
		for ctx.Err() == nil {
			r, err := s.store.PruneLogs(ctx, s.cfg.JobLogRetention, s.cfg.Now(), pruneBatch)
			if err != nil {
				if ctx.Err() == nil {
					s.log.Error("prune job logs", "err", err)
				}
				break
			}
			if r.JobID == "" {
				break
			}
			s.logsPruned.lines.Add(float64(r.Lines))
			if r.Done {
				s.logsPruned.jobs.Inc()
				s.log.Debug("pruned a job's log", "job", r.JobID, "retention", s.cfg.JobLogRetention)
			}
			gap := time.NewTimer(pruneGap)
			select {
			case <-ctx.Done():
			case <-gap.C:
			}
			gap.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func pprofMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// fastGzip replaces connect-go's gzip, which compresses at the default
// level, with gzip at its fastest level. On a 100-job EnqueueJobs answer
// (19.6 kB) it takes half the CPU (124 against 268 µs) for 5% more bytes
// (2,311 against 2,211): answers are lists of similar records. Any gzip
// client reads it.
var fastGzip = connect.WithCompression("gzip",
	func() connect.Decompressor { return &gzip.Reader{} },
	func() connect.Compressor {
		w, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
		return w
	})

// growStack runs each request on a stack grown to handlerStack first.
// HTTP/2 starts every request on a new goroutine, whose first stack the
// runtime sizes from the average goroutine at the last GC; with thousands
// of agent connections parked on tiny stacks (agentwire) that is the
// minimum, and a request then grew its stack three or four times, each
// time copying and re-adjusting the deep frames of protobuf decoding: 8%
// of imsd's CPU under a stream of EnqueueJob calls. Growing once at the
// top, where the stack is shallow, costs one small copy.
// (docs/performance-store.md, "Stacks grown once".)
func growStack(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reserveStack()
		next.ServeHTTP(w, r)
	})
}

// handlerStack is the stack an operator request starts with.
const handlerStack = 32 << 10

// reserveStack needs a frame of handlerStack bytes, so calling it grows
// the caller's stack to fit in one step.
//
//go:noinline
func reserveStack() byte {
	var frame [handlerStack - 4<<10]byte
	return frame[stackIndex]
}

// stackIndex is a variable so the compiler keeps reserveStack's frame.
var stackIndex = 0

// servedText is the agent versions an imsd of version serves (the
// version-skew window), as imsd --version and its start line say it.
func servedText(version string) string {
	if _, w := agentproto.AgentVersionServed(version, ""); w != "" {
		return w
	}
	return "any (this imsd is not a release build)"
}

// ServedAgentVersions is servedText for imsd's own build.
func ServedAgentVersions() string { return servedText(buildinfo.Get().Short()) }
