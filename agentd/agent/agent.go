// Package agent is agentd's runtime: it enrols once, then holds one outbound
// stream to imsd, runs each assigned job through a component plugin, and
// writes acks, logs and results back under the job's fencing token. It keeps
// unconfirmed writes in memory and resends them after a reconnect, so a
// broken stream or an imsd restart loses and duplicates nothing.
package agent

import (
	"cmp"
	"context"
	"crypto/ed25519"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/ledger"
	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/agentd/telemetry"
	"github.com/byoc-dev/byoc/internal/backoff"
	"github.com/byoc-dev/byoc/rpc/agentchannel"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1/agentv1connect"
)

// Runner runs one job to its end. The agent calls it in a goroutine per job.
type Runner interface {
	Run(ctx context.Context, job Job, log func(stream int32, text string)) Outcome
}

// Job is an assignment as the runner sees it.
type Job struct {
	// SupplyChain, when set, returns the customer's supply-chain policy
	// and the keys it trusts (supplychain.go); the runner checks it
	// before a plan or apply of an image, helm or terraform component.
	SupplyChain   func() (permissions.SupplyChainPolicy, []ed25519.PublicKey, error)
	ID            string
	InstallID     string
	Attempt       int32
	ComponentType string
	Operation     string
	Config        map[string]any
	Timeout       time.Duration
	// Mode is the permission mode the job needs; the agent checked it.
	Mode string
	// Grant is, for a break_glass job or a support session, the id of the
	// customer's break-glass grant it runs under (the one live at its
	// start): its credentials are that grant's role until that grant's
	// end, and it is stopped when that grant ends, whatever other grants
	// are live. Empty: the live grant that ends last.
	Grant string
	// WindowBound is set for a job of a release; the agent checked that
	// the customer's maintenance window is open.
	WindowBound bool
	// Component names the install's component the job is for; empty for
	// a job of no component (an action run).
	Component string
	// ApprovedPlanDigest is, for the apply of a plan an operator approved,
	// that plan's digest (signed by imsd): the runner applies only if a
	// fresh plan has the same.
	ApprovedPlanDigest string
	// Kill is closed when the job must stop at once, even while its
	// plugin is given a grace to stop (a lost lease, a newer attempt, the
	// agent stopping); nil: only the context says so.
	Kill <-chan struct{}
	// Lease says how long the agent's own lease on the attempt has left
	// (negative once it ran out); the runner tells the plugin
	// (pluginhost.StartOptions.Lease). Nil: no lease to tell.
	Lease func() time.Duration
	// Registry, set for a job that carried a registry grant, exchanges
	// the grant (once) for the vendor registry access its plugin gets.
	Registry func(context.Context) (RegistryAccess, error)
	// registryEnv is what Registry gave, for the operation's environment.
	registryEnv map[string]string
	// credEnv is the job's mode credentials' environment (which may
	// carry the install registry's credentials on a cloud stack).
	credEnv map[string]string
	// artifactRegistry, when set, is where the supply-chain check reads
	// a chart or module named by repository, instead of the install
	// registry (an offline bundle's layout root, before it is loaded).
	artifactRegistry string
}

// Outcome is how a job ended.
type Outcome struct {
	Outcome  agentv1.Outcome
	ExitCode int32
	Error    string
	Outputs  map[string]string
	// PlannedChanges are a plan's or drift check's changes, redacted.
	PlannedChanges []*agentv1.PlannedChange
	// PlanDigest is the digest of the plan the job made (a plan's, or an
	// approved apply's fresh plan), over PlannedChanges.
	PlanDigest string
	// PolicyFindings are what the job's policies said of its plan,
	// redacted.
	PolicyFindings []*agentv1.PolicyFinding
	// Drifted is a drift check's verdict.
	Drifted bool
	// Verifications are what the customer's supply-chain policy verified
	// of the job's artifact before it ran.
	Verifications []ArtifactVerification
}

// MaxReceiveBytes is the most the agent reads of one message from imsd
// (after decompression): imsd's largest, a page of 1,000 audit records,
// is far below it. imsd decides what it sends, and a message without a
// bound (a gzip bomb is a few kilobytes on the wire) would take the
// agent's memory; a larger one ends the stream, unread.
const MaxReceiveBytes = 128 << 20

// clientOptions are the options of the agent's client of imsd.
func clientOptions(cfg Config) []connect.ClientOption {
	return append(ledgerInterceptor(cfg.Ledger), connect.WithReadMaxBytes(cfg.MaxReceiveBytes))
}

// Config is everything the agent needs.
type Config struct {
	IMSURL      string
	EnrollToken string
	StateDir    string
	// Capacity is how many jobs run at once (default 4).
	Capacity int
	Runner   Runner
	Version  string
	Logger   *slog.Logger
	// HTTPClient dials imsd; the default speaks HTTP/2 over TLS or plaintext.
	HTTPClient *http.Client
	// BackoffMin and BackoffMax bound the reconnect delay (100ms, 30s).
	BackoffMin, BackoffMax time.Duration
	// VersionBackoff is how long the agent waits after imsd refused its
	// version (outside the version-skew window) before it asks again
	// (default 30m): an update, not a retry, fixes it.
	VersionBackoff time.Duration
	// FlushInterval batches log lines (default 50ms).
	FlushInterval time.Duration
	// MaxBufferedLines bounds the lines a job keeps while imsd does not
	// confirm them (default 100000); beyond it the oldest unsent lines are
	// dropped and a system line says how many.
	MaxBufferedLines int
	// MaxReceiveBytes bounds one message read from imsd (default
	// MaxReceiveBytes): a larger one ends the stream unread.
	MaxReceiveBytes int
	// Now is the clock (default time.Now). Leases are counted on both the
	// monotonic and the wall reading of what it returns.
	Now func() time.Time
	// Stack is what the hello reports of the agent's install stack (nil:
	// none): customer inputs as their value or "set", never a sensitive
	// value (stack.Values.Report), and the stack's outputs.
	Stack *agentv1.StackReport
	// PermissionsPoll is how often the agent looks at the customer's
	// permission file while it runs (default 1s); it also reads it right
	// before every job and at every heartbeat.
	PermissionsPoll time.Duration
	// Role is "install" (default) or "build" (the vendor's build agent),
	// sent at enrolment.
	Role string
	// PinWatcher, if set, is the customer's plugin pin file the loader
	// reads (agentd plugin pin): the agent records every change it finds
	// in its journal (plugin.pinned, plugin.unpinned), and the pins it
	// holds at start.
	PinWatcher *pluginhost.PinWatcher
	// Ledger, if set, records every message the agent sends to imsd (the
	// stream's through the channel's tap, the calls' through an
	// interceptor): agentd egress list|stats.
	Ledger *ledger.Ledger
	// RotateKeyEvery, if set, starts a rotation of the agent's own key
	// (rotate.go) once the key is this old: since its last rotation, or
	// for a key never rotated since it was made at enrolment, or, when
	// the identity does not say (enrolled by an older agentd), since the
	// agent started.
	RotateKeyEvery time.Duration
	// UpdateReport, if set, is the customer's update policy and the
	// agent's latest update decision, for the hello and every heartbeat.
	UpdateReport func() *agentv1.UpdateReport
	// OnUpdateOffer, if set, is given each agent release imsd offers
	// whose signature verifies (once per offer and process, and again
	// each time imsd sends it while the report asks imsd to confirm it:
	// UpdateReport.confirm_offer_id), in its own goroutine: it applies it
	// as the customer's policy allows, and records the decision that the
	// next report carries. confirm is the offer's UpdateOffer.confirm.
	OnUpdateOffer func(ctx context.Context, offerID, release string, confirm bool)
	// OnUpdateWithdrawal, if set, is given each offer imsd withdraws
	// whose signed withdrawal verifies for this agent (once per offer and
	// process), in its own goroutine: it drops the offer unless it was
	// applied, and records the decision that the next report carries.
	OnUpdateWithdrawal func(ctx context.Context, offerID string)
	// TelemetryTick is how often the app's telemetry sources are looked
	// at (default 1s); a source is read at its own declared interval.
	TelemetryTick time.Duration
	// Shell serves support shells (shell.go); unset, every one is
	// refused.
	Shell ShellConfig
}

// Agent is a running agentd.
type Agent struct {
	cfg    Config
	id     identity.Identity
	client agentv1connect.AgentServiceClient
	log    *slog.Logger
	// tokenClient exchanges registry grants at imsd's token endpoint
	// (plain HTTP requests, apart from the stream's connection).
	tokenClient *http.Client

	// instance is this process's random id, sent in every hello.
	instance string
	// startedAt is when New ran (the key's age when identity.json does
	// not say).
	startedAt time.Time
	// failedInRow counts the jobs that failed or timed out since the last
	// that succeeded, for the condition imsd's health counts.
	failedInRow atomic.Int32

	mu sync.Mutex
	// jobs holds the attempts the agent owns (keyed by job id): their
	// leases are renewed and their writes sent.
	jobs map[string]*jobRun
	// live holds, per job, the last attempt whose plugin has not exited
	// yet, including attempts given up and still stopping.
	live map[string]*jobRun
	// draining is set once the agent holds no job and takes none more
	// (Drain): an update replaces the process next.
	draining bool
	// offers are the update offers handed to OnUpdateOffer (session
	// goroutine only).
	offers map[string]bool
	// offersInFlight counts the offers and withdrawals handed on whose
	// handling has not ended (maxOffersInFlight).
	offersInFlight atomic.Int32
	// withdrawals are the offers handed to OnUpdateWithdrawal (session
	// goroutine only).
	withdrawals map[string]bool
	// keys are imsd's job signing keys by id (identity.IMSDKeys).
	keys map[string]ed25519.PublicKey
	// retired holds the ids of imsd's keys retired after a rotation.
	retired map[string]bool
	// seen records the attempts this agent accepted, to refuse replays
	// (seen.go); it is only used on the session's goroutine.
	seen *seenJobs
	// refusals are the refused assignments whose report imsd has not
	// confirmed yet, by job id and token.
	refusals map[refusalKey]*refusal
	// lease and heartbeat are what imsd's last welcome announced.
	lease, heartbeat time.Duration
	kick             chan struct{}
	// logKick starts the batching timer for log lines.
	logKick chan struct{}
	wg      sync.WaitGroup
	// connected is closed and replaced at every state change, for tests.
	stateCh   chan struct{}
	connected bool

	// permMu guards perm, the customer's permission state as last read,
	// and grant, their break-glass grants (permissions.go). It is never held together with mu.
	permMu sync.Mutex
	perm   permState
	grant  grantState
	// accepted is the newest generation of each control file the agent
	// accepted (by file name), read from its journal at the first look.
	accepted map[string]uint64
	// permKick asks the session for a heartbeat now: the permission
	// state changed.
	permKick chan struct{}

	// auditCopy is the agent's copy of its install's audit chain, journal
	// its own audit journal (audit.go, package auditlog); auditErr, under
	// mu, is why the copy last failed to take imsd's records.
	auditCopy, journal *auditlog.Log
	auditErr           error

	// keyMu guards self, the agent's identity as saved with its key now
	// (a.id holds the parts that never change, and no key), and rot, the
	// rotation of its key under way (rotate.go). rotErr is the last
	// rotation file refused (the watcher's goroutine only); rotKick asks
	// the session to reconnect for a rotation.
	keyMu   sync.Mutex
	self    identity.Identity
	rot     *identity.Rotation
	rotErr  error
	rotKick chan struct{}

	// telemetry reads the app's declared telemetry sources as the
	// customer's setting allows (telemetry.go).
	telemetry *telemetry.Collector
	// shellMu guards shells, the support sessions running now (shell.go),
	// and shellsStarting, those being started; shellOut carries their
	// events to the session's goroutine, which alone sends on the stream.
	shellMu        sync.Mutex
	shells         map[string]*shellSession
	shellsStarting int
	shellOut       chan *agentv1.ConnectRequest
	// recMu is held by the one goroutine sending recordings to imsd;
	// recKick asks it to look for more (recording.go).
	recMu   sync.Mutex
	recKick chan struct{}
}

// New loads the agent's identity from the state dir, enrolling first if
// there is none.
func New(ctx context.Context, cfg Config) (*Agent, error) {
	if cfg.IMSURL == "" {
		return nil, errors.New("the imsd URL is required (--ims)")
	}
	if cfg.StateDir == "" {
		return nil, errors.New("a state directory is required (--state-dir)")
	}
	if cfg.Runner == nil {
		return nil, errors.New("no job runner configured")
	}
	if cfg.Capacity <= 0 {
		cfg.Capacity = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = DefaultHTTPClient()
	}
	if cfg.BackoffMin == 0 {
		cfg.BackoffMin = 100 * time.Millisecond
	}
	if cfg.VersionBackoff == 0 {
		cfg.VersionBackoff = 30 * time.Minute
	}
	if cfg.BackoffMax == 0 {
		cfg.BackoffMax = 30 * time.Second
	}
	if cfg.FlushInterval == 0 {
		cfg.FlushInterval = 50 * time.Millisecond
	}
	if cfg.MaxBufferedLines == 0 {
		cfg.MaxBufferedLines = 100000
	}
	if cfg.MaxReceiveBytes <= 0 {
		cfg.MaxReceiveBytes = MaxReceiveBytes
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.PermissionsPoll <= 0 {
		cfg.PermissionsPoll = time.Second
	}
	a := &Agent{
		shells:      make(map[string]*shellSession),
		shellOut:    make(chan *agentv1.ConnectRequest, 64),
		recKick:     make(chan struct{}, 1),
		cfg:         cfg,
		client:      agentv1connect.NewAgentServiceClient(cfg.HTTPClient, strings.TrimRight(cfg.IMSURL, "/"), clientOptions(cfg)...),
		log:         cfg.Logger,
		tokenClient: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()},
		jobs:        make(map[string]*jobRun),
		live:        make(map[string]*jobRun),
		refusals:    make(map[refusalKey]*refusal),
		instance:    newInstanceID(),
		startedAt:   cfg.Now(),
		kick:        make(chan struct{}, 1),
		logKick:     make(chan struct{}, 1),
		permKick:    make(chan struct{}, 1),
		rotKick:     make(chan struct{}, 1),
		stateCh:     make(chan struct{}),
	}
	a.telemetry = &telemetry.Collector{Setting: a.telemetrySetting, Tick: cfg.TelemetryTick, Log: cfg.Logger, Now: cfg.Now,
		Hidden: telemetryHidden(cfg)}
	id, err := identity.Load(cfg.StateDir)
	switch {
	case err == nil:
		if cfg.EnrollToken != "" {
			a.log.Info("already enrolled; ignoring the enrolment token", "agent", id.AgentID, "state_dir", cfg.StateDir)
		}
	case errors.Is(err, identity.ErrNoIMSDKey):
		return nil, fmt.Errorf("%w: this agent cannot check that jobs come from imsd; to enrol again, move %s away and start agentd with a new --enroll-token (byoc install token INSTALL)",
			err, filepath.Join(cfg.StateDir, identity.FileName))
	case errors.Is(err, identity.ErrNotEnrolled):
		if cfg.EnrollToken == "" {
			return nil, fmt.Errorf("%s holds no agent identity: pass the install's enrolment token (--enroll-token) once", cfg.StateDir)
		}
		id, err = a.enroll(ctx)
		if err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("load identity: %w", err)
	}
	a.self = id
	if cfg.Ledger != nil {
		cfg.Ledger.SetInstall(id.InstallID)
	}
	// a.id is read without a lock: it holds no key, which a rotation
	// replaces (a.self, under keyMu).
	a.id = id
	a.id.PrivateKey = nil
	a.log = a.log.With("agent", id.AgentID)
	a.keys = make(map[string]ed25519.PublicKey, len(id.IMSDKeys))
	a.retired = make(map[string]bool, len(id.RetiredIMSDKeys))
	for _, r := range id.RetiredIMSDKeys {
		a.retired[r] = true
	}
	for _, k := range id.IMSDKeys {
		if !a.retired[agentproto.KeyID(k)] {
			a.keys[agentproto.KeyID(k)] = k
		}
	}
	a.seen, err = openSeen(cfg.StateDir, cfg.Now())
	if err != nil {
		return nil, err
	}
	if err := a.openAudit(); err != nil {
		return nil, err
	}
	// A rotation under way (one stopped by a crash too) is announced in
	// the first hello; it journals, so it follows openAudit.
	a.takeRotation()
	if j, ok := cfg.Runner.(interface {
		SetJournal(func(kind, subject string, data map[string]string))
	}); ok {
		j.SetJournal(a.note)
	}
	if w := cfg.PinWatcher; w != nil {
		w.OnChange = a.notePins
		w.OnRefusal = a.notePluginRefusal
		if err := w.LoadRefusals(); err != nil {
			a.log.Error("cannot read the agent's refusals of plugin releases", "err", err)
		}
		if _, err := w.Pins(); err != nil {
			a.log.Error("the customer's plugin pin file is refused; no external plugin runs until it is fixed", "err", err)
		}
	}
	return a, nil
}

// Journal record kinds of the customer's plugin pins.
const (
	KindPluginPinned   = "plugin.pinned"
	KindPluginUnpinned = "plugin.unpinned"
)

// notePins records changes of the customer's plugin pins in the agent's
// journal and its log.
func (a *Agent) notePins(changes []pluginhost.PinChange) {
	for _, c := range changes {
		data := map[string]string{"sha256": c.New}
		kind := KindPluginPinned
		if c.New == "" && c.OCI == "" {
			kind, data = KindPluginUnpinned, map[string]string{}
		}
		if c.Old != "" {
			data["previous"] = c.Old
		}
		if c.By != "" {
			data["pinned_by"] = c.By
		}
		if c.OCI != "" {
			data["oci"], data["version"] = c.OCI, c.Version
		}
		a.log.Info("plugin pin changed", "type", c.Type, "sha256", c.New, "previous", c.Old, "by", c.By, "oci", c.OCI, "version", c.Version)
		a.note(kind, "plugin:"+c.Type, data)
	}
}

// RulePluginRelease names the rule in a plugin release's refusal: one
// of the agent's checks of the release (its signature by a trusted imsd
// key, its digests, its type, its binary's pinned checksum); imsd's
// install artifacts name it so too.
const RulePluginRelease = "release"

// notePluginRefusal records in the agent's journal, as the refusals of
// a job's artifact are (supply_chain.refused), a refusal of a pinned
// plugin release that is new (the pin watcher tells a refusal repeated
// by every job once), and supply_chain.verified when a release held
// refused is installed after all.
func (a *Agent) notePluginRefusal(c pluginhost.RefusalChange) {
	data := map[string]string{"type": c.Type, "artifact": c.OCI, "digest": c.Digest(), "version": c.Version}
	if c.Accepted {
		data["key_id"], data["previously_refused"] = c.KeyID, c.Reason
		a.log.Info("plugin release verified after its refusal", "type", c.Type, "release", c.OCI, "version", c.Version, "key_id", c.KeyID)
		a.note(KindSupplyChainVerified, "plugin:"+c.Type, data)
		return
	}
	data["rule"], data["reason"] = RulePluginRelease, c.Reason
	a.log.Warn("refused a pinned plugin release", "type", c.Type, "release", c.OCI, "version", c.Version, "rule", RulePluginRelease, "reason", c.Reason)
	a.note(KindSupplyChainRefused, "plugin:"+c.Type, data)
}

// ErrTokenWithoutKey refuses an enrolment token that carries no
// fingerprint of imsd's signing key (one an older imsd issued): the agent
// could not tell imsd's key from a key a server in the middle sent.
var ErrTokenWithoutKey = errors.New("the enrolment token carries no fingerprint of imsd's job signing key (TOKEN.FINGERPRINT); an older imsd issued it: issue a new one with `byoc install token INSTALL`")

func (a *Agent) enroll(ctx context.Context) (identity.Identity, error) {
	// The token is SECRET.KEYID: KEYID is the fingerprint of the key
	// imsd will sign jobs with. It is checked before the token is spent.
	_, wantKey, ok := strings.Cut(a.cfg.EnrollToken, ".")
	if !ok || len(wantKey) != agentproto.KeyIDLen {
		return identity.Identity{}, ErrTokenWithoutKey
	}
	// A key made before enrolment (the customer set their controls
	// first) is the one to enrol with: their control files are signed
	// with it.
	key, err := identity.EnrolmentKey(a.cfg.StateDir)
	if err != nil {
		return identity.Identity{}, err
	}
	host, _ := os.Hostname()
	resp, err := a.client.Enroll(ctx, connect.NewRequest(&agentv1.EnrollRequest{
		EnrollmentToken: a.cfg.EnrollToken,
		PublicKey:       key.Public().(ed25519.PublicKey),
		Hostname:        host,
		Version:         a.cfg.Version,
		Role:            cmp.Or(a.cfg.Role, "install"),
	}))
	if err != nil {
		return identity.Identity{}, fmt.Errorf("enrol with %s: %w", a.cfg.IMSURL, err)
	}
	// The stream then opens a connection of its own: imsd serves a
	// connection whose first request is the agent stream on one goroutine
	// and no buffers, and the stream would otherwise reuse this one.
	a.cfg.HTTPClient.CloseIdleConnections()
	keys, err := enrolledKeys(wantKey, resp.Msg.ImsdPublicKey, resp.Msg.KeyChain)
	if err != nil {
		// Whoever answered is not the imsd that issued the token (or
		// swapped its key on the way): keep nothing of it.
		return identity.Identity{}, fmt.Errorf("enrol with %s: %w: a server in the middle, or a token of another imsd; not enrolled", a.cfg.IMSURL, err)
	}
	id := identity.Identity{AgentID: resp.Msg.AgentId, InstallID: resp.Msg.InstallId, IMSURL: a.cfg.IMSURL, PrivateKey: key,
		IMSDKeys: keys, KeyCreatedAt: a.now().UTC().Truncate(time.Second)}
	if err := identity.Save(a.cfg.StateDir, id); err != nil {
		return identity.Identity{}, fmt.Errorf("save identity: %w", err)
	}
	if err := identity.DropPending(a.cfg.StateDir); err != nil {
		a.log.Warn("cannot remove the pre-enrolment key file; identity.json holds the key", "err", err)
	}
	a.log.Info("enrolled", "agent", id.AgentID, "install", id.InstallID, "imsd_key", wantKey)
	return id, nil
}

// enrolledKeys returns the imsd keys an enrolment makes the agent trust:
// the key the token names (wantKey), and the keys its rotations endorsed
// (chain), which must include pub, the key imsd signs with now.
func enrolledKeys(wantKey string, pub []byte, chain []*agentv1.KeyEndorsement) ([]ed25519.PublicKey, error) {
	mismatch := fmt.Errorf("the server's job signing key (fingerprint %s) is not the one the enrolment token names (%s)", fingerprint(pub), wantKey)
	if len(pub) != ed25519.PublicKeySize {
		return nil, mismatch
	}
	// The token's key: imsd's current one, or a signer in the chain.
	var root ed25519.PublicKey
	if agentproto.KeyID(pub) == wantKey {
		root = pub
	}
	for _, e := range chain {
		if root == nil && len(e.SignerPublicKey) == ed25519.PublicKeySize && agentproto.KeyID(e.SignerPublicKey) == wantKey {
			root = e.SignerPublicKey
		}
	}
	if root == nil {
		return nil, mismatch
	}
	trusted := map[string]ed25519.PublicKey{wantKey: root}
	if _, err := agentproto.ExtendKeys(trusted, nil, endorsements(chain)); err != nil {
		return nil, err
	}
	if _, ok := trusted[agentproto.KeyID(pub)]; !ok {
		return nil, mismatch
	}
	keys := make([]ed25519.PublicKey, 0, len(trusted))
	keys = append(keys, root)
	for id, k := range trusted {
		if id != wantKey {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

func endorsements(chain []*agentv1.KeyEndorsement) []agentproto.Endorsement {
	out := make([]agentproto.Endorsement, len(chain))
	for i, e := range chain {
		out[i] = agentproto.Endorsement{Signer: e.SignerPublicKey, Key: e.PublicKey, Signature: e.Signature}
	}
	return out
}

// learnKeys trusts the keys imsd's key chain endorses by a key the agent
// trusts, and saves them with the identity. It runs on the session's
// goroutine, as check does.
func (a *Agent) learnKeys(chain []*agentv1.KeyEndorsement, retirements []*agentv1.KeyRetirement) {
	if len(chain) == 0 && len(retirements) == 0 {
		return
	}
	keys, retired := maps.Clone(a.keys), maps.Clone(a.retired)
	added, err := agentproto.ExtendKeys(keys, retired, endorsements(chain))
	if err != nil {
		a.log.Error("imsd's key chain does not verify; its new keys are not trusted", "err", err)
	}
	rs := make([]agentproto.Retirement, len(retirements))
	for i, r := range retirements {
		rs[i] = agentproto.Retirement{Signer: r.Signer, Key: r.Key, Signature: r.Signature}
	}
	removed, err := agentproto.RetireKeys(keys, retired, rs)
	if err != nil {
		a.log.Error("imsd's key retirements do not verify; no key is retired", "err", err)
	}
	if len(added) == 0 && len(removed) == 0 {
		return
	}
	// a.id is left as it was loaded (other goroutines read it); only the
	// saved copy and a.keys change.
	a.keyMu.Lock()
	id := a.self
	a.keyMu.Unlock()
	id.IMSDKeys = slices.Collect(maps.Values(keys))
	id.RetiredIMSDKeys = slices.Sorted(maps.Keys(retired))
	if err := identity.Save(a.cfg.StateDir, id); err != nil {
		a.log.Error("cannot save imsd's new signing keys; not changing which keys are trusted", "err", err)
		return
	}
	a.keyMu.Lock()
	a.self.IMSDKeys, a.self.RetiredIMSDKeys = id.IMSDKeys, id.RetiredIMSDKeys
	a.keyMu.Unlock()
	a.keys, a.retired = keys, retired
	for _, k := range added {
		a.log.Info("trusting imsd's new job signing key, endorsed by a key this agent trusts", "key_id", agentproto.KeyID(k))
	}
	for _, k := range removed {
		a.log.Warn("imsd retired its old job signing key; refusing it from now on", "key_id", agentproto.KeyID(k))
	}
}

// trustedKeys are imsd's keys the agent trusts and the ids of those
// retired, as identity.json holds them (the session's goroutine).
func (a *Agent) trustedKeys() ([]ed25519.PublicKey, []string) {
	return slices.Collect(maps.Values(a.keys)), slices.Sorted(maps.Keys(a.retired))
}

// keyIDs are the ids of imsd's keys the agent trusts, sorted.
func (a *Agent) keyIDs() []string { return slices.Sorted(maps.Keys(a.keys)) }

// fingerprint is a received key's id, or what is wrong with it.
func fingerprint(pub []byte) string {
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Sprintf("none: %d bytes", len(pub))
	}
	return agentproto.KeyID(pub)
}

// ID returns the agent's id.
func (a *Agent) ID() string { return a.id.AgentID }

// InstallID returns the install the agent is bound to.
func (a *Agent) InstallID() string { return a.id.InstallID }

// WaitConnected blocks until the agent has a live stream or ctx ends.
func (a *Agent) WaitConnected(ctx context.Context) error {
	for {
		a.mu.Lock()
		ok, ch := a.connected, a.stateCh
		a.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (a *Agent) setConnected(v bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.connected = v
	close(a.stateCh)
	a.stateCh = make(chan struct{})
}

// Run holds the stream to imsd until ctx ends, reconnecting with jittered
// exponential backoff. Jobs keep running across reconnects. When ctx ends,
// running jobs are stopped; their leases run out and imsd hands them out again.
func (a *Agent) Run(parent context.Context) error {
	defer a.wg.Wait()
	a.closeAbandonedSessions()
	// ctx also ends when the customer revokes the agent (revoke.go), with
	// the revocation as its cause.
	ctx, revoked := context.WithCancelCause(parent)
	defer revoked(nil)
	wctx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	go a.watchLeases(wctx)
	go a.watchPermissions(wctx, revoked)
	go a.telemetry.Run(wctx)
	retry := backoff.New(a.cfg.BackoffMin, a.cfg.BackoffMax)
	for {
		start := time.Now()
		err := a.session(ctx)
		a.setConnected(false)
		if ctx.Err() != nil {
			return a.stopped(ctx)
		}
		if errors.Is(err, errReconnect) {
			// A step of the agent's key rotation: reconnect at once.
			retry.Reset()
			continue
		}
		if errors.Is(err, errWrongInstall) {
			a.log.Error("refusing the server's jobs", "err", err)
		}
		if errors.Is(err, errIdentityRefused) {
			// Retrying cannot fix a revoked or unknown identity.
			a.stopAll("agent identity refused")
			return fmt.Errorf("imsd refused this agent's identity (%w); to enrol again, move %s away and start agentd with a new --enroll-token (byoc install token INSTALL)", err, filepath.Join(a.cfg.StateDir, identity.FileName))
		}
		if window, refused := versionRefused(err); refused {
			a.log.Error("imsd does not serve this agentd version: update agentd (re-run the install stack with the vendor's current agent); asking again later",
				"version", a.cfg.Version, "served", window, "in", a.cfg.VersionBackoff, "err", err)
			if !backoff.Wait(ctx, a.cfg.VersionBackoff) {
				return a.stopped(ctx)
			}
			continue
		}
		if time.Since(start) > 10*time.Second {
			retry.Reset()
		}
		// Full jitter: spread a fleet's reconnects after an imsd restart.
		delay := retryDelay(err, retry, a.cfg.BackoffMax)
		if hb, held := a.holding(); held && delay > hb {
			// Jobs are held: come back within a heartbeat, long before
			// their leases run out, and re-attach them.
			delay = rand.N(hb + 1)
		}
		if errors.Is(err, errUntrustedIMSD) || errors.Is(err, errUnsignedRefusal) {
			a.log.Error("refusing the server at imsd's URL: it does not hold a key this agent trusts; taking no job from it; reconnecting", "err", err, "in", delay.Round(time.Millisecond))
		} else if errors.Is(err, agentchannel.ErrChannel) {
			// Something on the path altered, replayed, reordered, copied
			// or forged a message: a security event, not a network blip.
			a.log.Error("the stream to imsd carried a message that is not imsd's (tampered with on the path); reconnecting", "err", err, "in", delay.Round(time.Millisecond))
		} else if _, shed := retryHint(err); shed {
			a.log.Info("imsd is busy with other agents' hellos; reconnecting when it asked", "in", delay.Round(time.Millisecond))
		} else if connect.CodeOf(err) == connect.CodeAborted && strings.Contains(err.Error(), "identity") {
			a.log.Error("stream to imsd ended; reconnecting", "err", err, "in", delay.Round(time.Millisecond))
		} else {
			a.log.Warn("stream to imsd ended; reconnecting", "err", err, "in", delay.Round(time.Millisecond))
		}
		if !backoff.Wait(ctx, delay) {
			return a.stopped(ctx)
		}
	}
}

// stopped stops every job once Run's ctx ended, and returns what Run
// returns: nil when the agent is shutting down, the revocation when the
// customer revoked it.
func (a *Agent) stopped(ctx context.Context) error {
	if cause := context.Cause(ctx); errors.Is(cause, identity.ErrRevoked) {
		a.stopAll("the customer revoked this agent")
		a.log.Error("the customer revoked this agent; stopping", "err", cause)
		return cause
	}
	a.stopAll("agent shutting down")
	return nil
}

// versionRefused reports whether err is imsd's refusal of the agent's
// version, and the window of versions imsd serves.
func versionRefused(err error) (string, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeFailedPrecondition {
		return "", false
	}
	w := ce.Meta().Get(agentproto.VersionRefusalHeader)
	return w, w != ""
}

// retryDelay is the wait before the next connection: the backoff's
// next delay, or, when imsd shed the stream with a retry hint
// (admission control, agentproto.RetryAfter), a uniform random time up
// to the hint (at most max), so that a fleet told the same comes back
// spread over the time imsd asked for.
func retryDelay(err error, retry *backoff.Backoff, max time.Duration) time.Duration {
	hint, ok := retryHint(err)
	if !ok {
		return retry.Next()
	}
	hint = min(hint, max)
	if retry.Rand != nil {
		return retry.Rand(hint)
	}
	return rand.N(hint + 1)
}

// retryHint is the retry hint of a stream imsd shed (resource_exhausted
// with agentproto.RetryAfterHeader), if err is one.
func retryHint(err error) (time.Duration, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted {
		return 0, false
	}
	return agentproto.ParseRetryAfter(ce.Meta().Get(agentproto.RetryAfterHeader))
}

func (a *Agent) stopAll(reason string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, j := range a.jobs {
		a.stopLocked(j, reason)
	}
}

// holding reports whether the agent holds any job, and the heartbeat
// interval imsd announced (a second before any welcome).
func (a *Agent) holding() (time.Duration, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	hb := a.heartbeat
	if hb <= 0 {
		hb = time.Second
	}
	return hb, len(a.jobs) > 0
}

// errWrongInstall ends a stream whose server named another install.
var errWrongInstall = errors.New("wrong install")

func (a *Agent) now() time.Time { return a.cfg.Now() }

// newInstanceID returns a random id for this process.
func newInstanceID() string {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}
