// Package operatorapi serves byoc.ims.v1.OperatorService: the API the byoc
// CLI and TUI use to manage apps, installs and jobs and to follow job logs.
// It validates every request before touching the store, so a bad request
// changes nothing and its error names the offending field.
package operatorapi

import (
	"context"
	"log/slog"
	"regexp"
	"time"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/dispatch"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/registry"
	"github.com/byoc-dev/byoc/imsd/release"
	"github.com/byoc-dev/byoc/imsd/rpcerr"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/telemetry"
	"github.com/byoc-dev/byoc/imsd/workflow"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
	"github.com/byoc-dev/byoc/schema/app/config"
)

// Defaults and limits for requests.
const (
	DefaultJobTimeout     = time.Hour
	MaxJobTimeout         = 24 * time.Hour
	DefaultMaxAttempts    = 3
	MaxMaxAttempts        = 10
	DefaultEnrollTokenTTL = 24 * time.Hour
	MaxEnrollTokenTTL     = 30 * 24 * time.Hour
	MaxConfigBytes        = 256 << 10
	MaxInputs             = 200
	MaxInputValueBytes    = config.MaxInputValueBytes
	logPage               = 500
)

// Config tunes the service.
type Config struct {
	// HeartbeatInterval is what agents are told; an agent unseen for three
	// intervals counts as disconnected on other replicas.
	HeartbeatInterval time.Duration
	// LeaseDuration is the lease of a job handed to a connected agent at
	// enqueue; zero never hands jobs over at enqueue, leaving every job
	// for the agents to claim.
	LeaseDuration time.Duration
	// LeaseGrace is added to a lease before imsd may hand the job out
	// again (agentapi.Config.LeaseGrace).
	LeaseGrace time.Duration
	// FollowPoll bounds how long a log follower waits without a wake-up
	// before it re-reads the database (a safety net, not the normal path).
	FollowPoll time.Duration
	// FleetPoll is how often a fleet watcher re-reads the database without
	// a wake-up: it catches heartbeats and other replicas' changes.
	FleetPoll time.Duration
	// FleetCoalesce is the least time between two re-reads of one fleet
	// watcher, so a burst of changes costs one read.
	FleetCoalesce time.Duration
	// BreakGlassRequestTTL is how long a break-glass request stays
	// pending (default 30m).
	BreakGlassRequestTTL time.Duration
	// Engine runs workflows; the service queues them and wakes it.
	Engine *workflow.Engine
	// Releases creates and rolls out releases.
	Releases *release.Engine
	// SigningKeyID is the id of imsd's job signing key, which every
	// enrolment token carries (auth.NewEnrollToken).
	SigningKeyID string
	// SigningKey is imsd's job signing key, which signs offline bundles'
	// jobs and manifests (bundles.go); zero: no bundles.
	SigningKey auth.SigningKey
	// SigningKeyFile is the file SigningKey was read from ("": none to
	// check). CreateBundle refuses once it holds another key: imsd key
	// rotate ran, and a bundle signed with the old key now would outlive
	// the time its results import (auth.PreviousKeyUse counts from the
	// rotation).
	SigningKeyFile string
	// PreviousSigningKeys are the keys SigningKey replaced
	// (auth.LoadPreviousKeys): results of offline bundles signed with
	// one of them open and check with it (bundleresults.go) while it is
	// auth.PreviousKey.UsableAt the time of the import; one with no
	// Private key is one imsd no longer uses, named in refusals. They
	// sign nothing.
	PreviousSigningKeys []auth.PreviousKey
	// RegistryURL is the vendor registry as agents reach it, and
	// RegistryTokens signs its tokens (nil: none): byoc bundle create
	// copies the bundle's artifacts from it.
	RegistryURL    string
	RegistryTokens *registry.Signer
	// Login is the single sign-on settings byoc login reads.
	Login LoginConfig
	// Telemetry holds the app telemetry agents forwarded (nil: none).
	Telemetry *telemetry.Store
	// ResultsPartWait is how long UploadBundleResults waits for a part
	// (0: the default, ResultsPartWait).
	ResultsPartWait time.Duration
}

// Service implements imsv1connect.OperatorServiceHandler.
type Service struct {
	imsv1connect.UnimplementedOperatorServiceHandler
	store *store.Store
	hub   *dispatch.Hub
	cfg   Config
	now   func() time.Time
	log   *slog.Logger
	// sensitive caches which inputs are sensitive, per app (sensitive.go).
	sensitive sensitiveNames
	// tokenRevoked drops the Authenticator's cache on this replica
	// (OnTokenRevoked); other replicas' caches expire within seconds.
	tokenRevoked func()
	// uploads counts UploadBundleResults calls in progress.
	uploads uploadSlots
}

// OnTokenRevoked calls f after every token revocation, so a revoked
// token stops working on this replica at once.
func (s *Service) OnTokenRevoked(f func()) { s.tokenRevoked = f }

// New returns the operator service.
func New(st *store.Store, hub *dispatch.Hub, cfg Config, now func() time.Time, log *slog.Logger) *Service {
	if cfg.FollowPoll == 0 {
		cfg.FollowPoll = 2 * time.Second
	}
	if cfg.FleetPoll == 0 {
		cfg.FleetPoll = 5 * time.Second
	}
	if cfg.BreakGlassRequestTTL == 0 {
		cfg.BreakGlassRequestTTL = 30 * time.Minute
	}
	if cfg.FleetCoalesce == 0 {
		cfg.FleetCoalesce = 100 * time.Millisecond
	}
	return &Service{store: st, hub: hub, cfg: cfg, now: now, log: log}
}

func (s *Service) err(ctx context.Context, err error) error {
	noteRefusal(ctx, err)
	return rpcerr.ToConnect(ctx, s.log, err)
}

var (
	nameRE     = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	inputKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	typeRE     = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)
)

func checkName(field, v string) error {
	if v == "" {
		return errs.Field(field, "is required")
	}
	if !nameRE.MatchString(v) {
		return errs.Field(field, "%q is not a valid name: use 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit", v)
	}
	return nil
}

func checkInputs(field string, in map[string]string) error {
	if len(in) > MaxInputs {
		return errs.Field(field, "has %d entries; at most %d are allowed", len(in), MaxInputs)
	}
	for k, v := range in {
		if !inputKeyRE.MatchString(k) {
			return errs.Field(field+"["+k+"]", "is not a valid input name: use letters, digits and '_', not starting with a digit")
		}
		if len(v) > MaxInputValueBytes {
			return errs.Field(field+"["+k+"]", "is %d bytes; at most %d are allowed", len(v), MaxInputValueBytes)
		}
	}
	return nil
}

func ttl(field string, seconds int64) (time.Duration, error) {
	switch {
	case seconds == 0:
		return DefaultEnrollTokenTTL, nil
	case seconds < 0:
		return 0, errs.Field(field, "must not be negative")
	case seconds > int64(MaxEnrollTokenTTL/time.Second):
		return 0, errs.Field(field, "must be at most %d (30 days)", int64(MaxEnrollTokenTTL/time.Second))
	}
	return time.Duration(seconds) * time.Second, nil
}
