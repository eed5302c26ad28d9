// Package stack is the install stack as the agent sees it: the stack
// config the stack wrote (internal/stackconfig), the values it keeps for
// the customer (the enrolment token, customer-provided inputs, secrets:
// in Secrets Manager or local files) and the role of each permission
// mode, which the agent assumes through STS for each job so that the job
// runs with that role's short-lived credentials and never the agent's own.
//
// AWS is reached through aws-sdk-go-v2's sts and secretsmanager clients.
// The agent's own credentials come from the environment (AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) when set, else from the EC2
// instance profile (IMDSv2); the SDK's whole default chain (config
// files, SSO) is not linked, to keep agentd small.
//
// An Azure stack (format azure, azure.go) gives each mode a user-assigned
// managed identity instead of a role, reached through azidentity, and
// keeps its values in Key Vault (azsecrets). A Google Cloud stack
// (format gcp, gcp.go) gives each mode a service account that the agent
// impersonates through the IAM Credentials API, and keeps its values in
// Secret Manager (google.golang.org/api's clients).
package stack

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials/ec2rolecreds"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	ststypes "github.com/aws/aws-sdk-go-v2/service/sts/types"
	"github.com/aws/smithy-go"

	"github.com/byoc-dev/byoc/agentd/secrets"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/stackconfig"
)

// STSAPI is the part of the STS client the agent uses.
type STSAPI interface {
	AssumeRole(ctx context.Context, in *sts.AssumeRoleInput, opts ...func(*sts.Options)) (*sts.AssumeRoleOutput, error)
	GetCallerIdentity(ctx context.Context, in *sts.GetCallerIdentityInput, opts ...func(*sts.Options)) (*sts.GetCallerIdentityOutput, error)
}

// SecretsAPI is the part of the Secrets Manager client the agent uses.
type SecretsAPI interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// Stack is an opened stack config.
type Stack struct {
	Config *stackconfig.Config
	// Path is the stack config's file; relative paths in it are relative
	// to its directory.
	Path    string
	STS     STSAPI
	Secrets SecretsAPI
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	azure *azureState
	gcp   *gcpState
}

// Open reads the stack config at path and, for a CloudFormation stack,
// builds the AWS clients (region and endpoints from the config).
func Open(path string) (*Stack, error) { return OpenWith(path, OpenOptions{}) }

// OpenWith is Open with options; an Azure stack (format azure) gets its
// managed identity and Key Vault clients.
func OpenWith(path string, o OpenOptions) (*Stack, error) {
	c, err := stackconfig.Read(path)
	if err != nil {
		return nil, err
	}
	s := &Stack{Config: c, Path: path}
	if c.Format == stackconfig.FormatCloudFormation {
		cfg := aws.Config{Region: c.Region, Credentials: aws.NewCredentialsCache(OwnCredentials())}
		s.STS = sts.NewFromConfig(cfg, func(o *sts.Options) {
			if u := c.Endpoints["sts"]; u != "" {
				o.BaseEndpoint = aws.String(u)
			}
		})
		s.Secrets = secretsmanager.NewFromConfig(cfg, func(o *secretsmanager.Options) {
			if u := c.Endpoints["secretsmanager"]; u != "" {
				o.BaseEndpoint = aws.String(u)
			}
		})
	}
	if c.Format == stackconfig.FormatAzure {
		if err := s.openAzure(o); err != nil {
			return nil, fmt.Errorf("stack config %s: %w", path, err)
		}
	}
	if c.Format == stackconfig.FormatGCP {
		if err := s.openGCP(o); err != nil {
			return nil, fmt.Errorf("stack config %s: %w", path, err)
		}
	}
	return s, nil
}

// OwnCredentials are the agent's own: from the environment when set (a
// developer machine, tests), else the instance profile's.
func OwnCredentials() aws.CredentialsProvider {
	if id, key := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"); id != "" && key != "" {
		tok := os.Getenv("AWS_SESSION_TOKEN")
		return aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: id, SecretAccessKey: key, SessionToken: tok, Source: "environment"}, nil
		})
	}
	return ec2rolecreds.New()
}

func (s *Stack) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// path resolves a path of the stack config.
func (s *Stack) path(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(s.Path), p)
}

// read returns the value a source holds; ok is false for an empty source.
func (s *Stack) read(ctx context.Context, src stackconfig.Source) (v string, ok bool, err error) {
	switch {
	case src.SecretARN != "":
		if s.Secrets == nil {
			return "", false, fmt.Errorf("%s: this stack has no Secrets Manager client", src)
		}
		out, err := s.Secrets.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(src.SecretARN)})
		if err != nil {
			return "", false, fmt.Errorf("read %s: %w", src, awsErr(err))
		}
		if out.SecretString == nil {
			return "", false, fmt.Errorf("read %s: it has no SecretString (a binary secret)", src)
		}
		return *out.SecretString, true, nil
	case src.KeyVaultSecret != "":
		v, err := s.readKeyVault(ctx, src)
		return v, err == nil, err
	case src.GCPSecret != "":
		v, err := s.readGCPSecret(ctx, src)
		return v, err == nil, err
	case src.File != "":
		p := s.path(src.File)
		fi, err := os.Stat(p)
		if err != nil {
			return "", false, fmt.Errorf("read %s: %w", src, err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			return "", false, fmt.Errorf("%s is accessible by group or others (mode %v); chmod 600 it", p, fi.Mode().Perm())
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return "", false, fmt.Errorf("read %s: %w", src, err)
		}
		return strings.TrimRight(string(b), "\r\n"), true, nil
	}
	return "", false, nil
}

// EnrollToken reads the enrolment token the stack keeps.
func (s *Stack) EnrollToken(ctx context.Context) (string, error) {
	v, ok, err := s.read(ctx, s.Config.EnrollToken)
	if err != nil {
		return "", fmt.Errorf("enrolment token: %w", err)
	}
	if !ok || strings.TrimSpace(v) == "" {
		where := s.Config.EnrollToken
		return "", fmt.Errorf("enrolment token: none in %s (byoc install token %s gives one)", where, s.Config.Install)
	}
	return strings.TrimSpace(v), nil
}

// Values are the customer's values the stack holds.
type Values struct {
	// Inputs are the customer-provided inputs that are set, by name.
	Inputs map[string]string
	// Secrets are the app's secrets that are set, by name.
	Secrets map[string]string
	// Report is what imsd is told of the inputs: the value of a
	// non-sensitive one, "set" for a sensitive one; unset inputs are
	// missing.
	Report map[string]string
	// Sensitive lists the values to redact: every secret and sensitive
	// input.
	Sensitive []string
}

// Set is how a sensitive input that has a value is reported to imsd.
const Set = "set"

// Values reads the customer's inputs and secrets.
func (s *Stack) Values(ctx context.Context) (Values, error) {
	out := Values{Inputs: map[string]string{}, Secrets: map[string]string{}, Report: map[string]string{}}
	var file map[string]string
	if s.Config.SecretsFile != "" {
		p := s.path(s.Config.SecretsFile)
		var err error
		if file, err = secrets.Load(p); err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				return out, err
			}
			file = map[string]string{}
		}
	}
	fromFile := func(src stackconfig.Source, name string) (string, bool, error) {
		if src.File != "" && src.File == s.Config.SecretsFile {
			v, ok := file[name]
			return v, ok, nil
		}
		return s.read(ctx, src)
	}
	for _, name := range sortedKeys(s.Config.Inputs) {
		in := s.Config.Inputs[name]
		var v string
		var ok bool
		var err error
		switch {
		case in.Value != nil:
			v, ok = *in.Value, true
		case in.From != nil:
			v, ok, err = fromFile(*in.From, name)
		case s.Config.SecretsFile != "":
			v, ok = file[name]
		}
		if err != nil {
			return out, fmt.Errorf("input %s (stack parameter %s): %w", name, in.Parameter, err)
		}
		if !ok || v == "" {
			continue
		}
		out.Inputs[name] = v
		if in.Sensitive {
			out.Report[name] = Set
			out.Sensitive = append(out.Sensitive, v)
		} else {
			out.Report[name] = v
		}
	}
	for _, name := range sortedKeys(s.Config.Secrets) {
		src := s.Config.Secrets[name]
		v, ok, err := fromFile(src, name)
		if err != nil {
			return out, fmt.Errorf("secret %s (stack parameter %s): %w", name, src.Parameter, err)
		}
		if ok && v != "" {
			out.Secrets[name] = v
			out.Sensitive = append(out.Sensitive, v)
		}
	}
	return out, nil
}

// decodeB64 decodes a Google API's base64 bytes field.
func decodeB64(s string) (string, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		if b, err = base64.URLEncoding.DecodeString(s); err != nil {
			return "", fmt.Errorf("payload is not base64: %w", err)
		}
	}
	return string(b), nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// RoleError is a job's mode having no role: disabled in the stack.
type RoleError struct {
	Mode      string
	Role      string
	Parameter string
	Format    string
}

func (e *RoleError) Error() string {
	where := "update the install stack with parameter " + e.Parameter + "=true"
	if e.Format == stackconfig.FormatAzure {
		where = "redeploy the install stack's ARM template (az deployment group create) with parameter " + e.Parameter + "=true"
	}
	if e.Format == stackconfig.FormatGCP {
		where = "apply the install stack's Terraform configuration again (its Infrastructure Manager deployment) with variable " + e.Parameter + " = true"
	}
	if e.Format == stackconfig.FormatLocal {
		where = "set modes." + e.Mode + ".enabled (parameter " + e.Parameter + ") to true in the local stack's stack.json and restart agentd"
	}
	return fmt.Sprintf("the %s permission mode's role %s is turned off in this install's stack: %s", e.Mode, e.Role, where)
}

// Credentials are a job's cloud credentials.
type Credentials struct {
	// Env is what the job's operation gets: AWS_ACCESS_KEY_ID,
	// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION (empty for a
	// local stack).
	Env map[string]string
	// Secret lists the values to redact (the secret key and token).
	Secret []string
	// RoleARN is the role assumed; Expires when the credentials end.
	RoleARN string
	Expires time.Time
}

// Role returns the role a job of mode uses; grantRole names a break-glass
// grant's role, which wins over the break_glass mode's role when the stack
// has it.
func (s *Stack) Role(mode, grantRole string) (stackconfig.Role, error) {
	r, ok := s.Config.Modes[mode]
	if mode == "break_glass" && grantRole != "" {
		if gr, ok2 := s.Config.BreakGlassRoles[grantRole]; ok2 {
			r, ok = gr, true
		}
	}
	if !ok {
		return r, &RoleError{Mode: mode, Role: stackconfig.Pascal(mode) + "Role", Parameter: stackconfig.ModeParameter(mode), Format: s.Config.Format}
	}
	if !r.Enabled {
		return r, &RoleError{Mode: mode, Role: r.Name, Parameter: r.Parameter, Format: s.Config.Format}
	}
	return r, nil
}

// MinSession and MaxSession bound an assumed role's session. STS refuses
// less than 15 minutes; an instance profile's session assuming another
// role is role chaining, which AWS caps at one hour.
const (
	MinSession = 15 * time.Minute
	MaxSession = time.Hour
)

// JobGrace is how long a job's credentials outlive its time limit: the
// agent stops the job at its limit, and the operation may still be
// winding down (terraform writing its state) for a moment after.
const JobGrace = 5 * time.Minute

var sessionNameRE = regexp.MustCompile(`[^\w+=,.@-]`)

// NoGrantError is a break-glass role asked for without a live grant: the
// agent never assumes a break-glass role then.
type NoGrantError struct {
	// State says what the grants are (none, expired, revoked), as the
	// caller knows them; Ended is the grant's end when one was given.
	State string
	Ended time.Time
}

func (e *NoGrantError) Error() string {
	if e.State != "" {
		return "no break-glass role assumed: " + e.State
	}
	msg := "the break-glass role is assumed only under a live break-glass grant"
	if !e.Ended.IsZero() {
		msg += fmt.Sprintf(": the grant ended at %s", e.Ended.UTC().Format(time.RFC3339))
	}
	return msg
}

// SessionPolicy is the session policy every job's credentials carry (the
// AssumeRole Policy parameter): it passes through what the role allows
// (an Allow of everything, which IAM intersects with the role's own
// policies, so it adds nothing) and explicitly denies every action from
// end on (aws:CurrentTime DateGreaterThanEquals end). The Deny, not a
// conditional Allow, is what bounds the credentials: an explicit deny
// in a session policy wins over every allow, a resource policy's that
// names the session included, whereas an Allow that stops matching only
// leaves an implicit deny that such a resource policy can still
// override. STS's own expiry is at least 15 minutes; this ends the
// credentials' power at end, to the second, whatever STS says.
func SessionPolicy(end time.Time) string {
	return `{"Version":"2012-10-17","Statement":[` +
		`{"Sid":"RoleAllows","Effect":"Allow","Action":"*","Resource":"*"},` +
		`{"Sid":"ByocEnd","Effect":"Deny","Action":"*","Resource":"*","Condition":{"DateGreaterThanEquals":{"aws:CurrentTime":"` +
		end.UTC().Format(time.RFC3339) + `"}}}]}`
}

// DenyAllPolicy is the session policy of a role assumed only to check
// that it can be (agentd preflight): the credentials can do nothing.
const DenyAllPolicy = `{"Version":"2012-10-17","Statement":[{"Sid":"ByocCheckOnly","Effect":"Deny","Action":"*","Resource":"*"}]}`

// Assume returns credentials for a job of mode: STS AssumeRole of the
// mode's role with the job's id as the session name, whose power ends at
// the job's time limit plus JobGrace (limit <= 0: MaxSession) and, for
// break_glass, no later than until, the live grant's end, by the session
// policy SessionPolicy. The STS session itself lasts as long, within
// MinSession and MaxSession. A break_glass job with no live grant (until
// zero or past) gets a *NoGrantError and no role is assumed. A local
// stack's enabled mode gives no credentials.
func (s *Stack) Assume(ctx context.Context, mode, grantRole, jobID string, limit time.Duration, until time.Time) (Credentials, error) {
	r, err := s.Role(mode, grantRole)
	if err != nil {
		return Credentials{}, err
	}
	now := s.now()
	if mode == "break_glass" && !until.After(now) {
		return Credentials{}, &NoGrantError{Ended: until}
	}
	if s.Config.Format == stackconfig.FormatAzure {
		return s.assumeAzure(ctx, mode, r)
	}
	if s.Config.Format == stackconfig.FormatLocal || r.ARN == "" && s.Config.Format != stackconfig.FormatGCP {
		return Credentials{}, nil
	}
	if limit <= 0 {
		limit = MaxSession
	}
	end := now.Add(limit + JobGrace)
	if mode == "break_glass" && until.Before(end) {
		end = until
	}
	if s.Config.Format == stackconfig.FormatGCP {
		return s.assumeGCP(ctx, mode, r, now, end)
	}
	d := max(MinSession, min(end.Sub(now), MaxSession))
	out, err := s.assume(ctx, r, jobID, d, SessionPolicy(end))
	if err != nil {
		return Credentials{}, fmt.Errorf("assume the %s role %s (%s): %w; check that the stack's %s is true and the role exists", mode, r.Name, r.ARN, awsErr(err), r.Parameter)
	}
	c := out.Credentials
	if c == nil || c.AccessKeyId == nil || c.SecretAccessKey == nil || c.SessionToken == nil {
		return Credentials{}, fmt.Errorf("assume %s: STS answered without credentials", r.ARN)
	}
	creds := Credentials{
		Env: map[string]string{
			"AWS_ACCESS_KEY_ID":     *c.AccessKeyId,
			"AWS_SECRET_ACCESS_KEY": *c.SecretAccessKey,
			"AWS_SESSION_TOKEN":     *c.SessionToken,
			"BYOC_ROLE_ARN":         r.ARN,
		},
		Secret:  []string{*c.SecretAccessKey, *c.SessionToken},
		RoleARN: r.ARN,
	}
	if s.Config.Region != "" {
		creds.Env["AWS_REGION"] = s.Config.Region
		creds.Env["AWS_DEFAULT_REGION"] = s.Config.Region
	}
	// The credentials end at end, whatever STS says: the SDKs refresh
	// (and fail) from then on rather than meet the session policy's deny.
	creds.Expires = end
	if c.Expiration != nil && c.Expiration.Before(end) {
		creds.Expires = *c.Expiration
	}
	creds.Env["AWS_CREDENTIAL_EXPIRATION"] = creds.Expires.UTC().Format(time.RFC3339)
	return creds, nil
}

// assume calls STS AssumeRole for role r with session policy policy.
func (s *Stack) assume(ctx context.Context, r stackconfig.Role, jobID string, d time.Duration, policy string) (*sts.AssumeRoleOutput, error) {
	if s.STS == nil {
		return nil, errors.New("this stack has no STS client")
	}
	name := sessionNameRE.ReplaceAllString("byoc-"+jobID, "-")
	if len(name) > 64 {
		name = name[:64]
	}
	return s.STS.AssumeRole(ctx, &sts.AssumeRoleInput{
		RoleArn: aws.String(r.ARN), RoleSessionName: aws.String(name), DurationSeconds: aws.Int32(int32(d / time.Second)),
		Policy: aws.String(policy), Tags: s.sessionTags(),
	})
}

// sessionTags are the stack config's session tags (the install's name
// and labels) for AssumeRole, by key; nil when it has none (a stack
// whose roles' trust policies do not allow sts:TagSession).
func (s *Stack) sessionTags() []ststypes.Tag {
	var out []ststypes.Tag
	for _, k := range slices.Sorted(maps.Keys(s.Config.SessionTags)) {
		out = append(out, ststypes.Tag{Key: aws.String(k), Value: aws.String(s.Config.SessionTags[k])})
	}
	return out
}

// CheckRole assumes the role of mode (grantRole: a break-glass grant's
// role) to check that the agent can, as agentd preflight does, with the
// session policy DenyAllPolicy: the credentials it gets can do nothing
// and are dropped. It returns the role's ARN ("" for a local stack).
func (s *Stack) CheckRole(ctx context.Context, mode, grantRole string) (string, error) {
	r, err := s.Role(mode, grantRole)
	if err != nil {
		return "", err
	}
	if s.Config.Format == stackconfig.FormatAzure {
		// A token of the identity, dropped: Azure has no deny-all
		// session policy, so it is never handed on.
		if _, err := s.azureToken(ctx, r); err != nil {
			return "", fmt.Errorf("get a token of the %s managed identity %s (client id %s): %w; check that the stack's %s is true and the identity is attached to the agent's VM", mode, r.Name, r.ClientID, azErr(err), r.Parameter)
		}
		return "managed identity " + r.ClientID, nil
	}
	if s.Config.Format == stackconfig.FormatGCP {
		// A token of the account, dropped: Google has no deny-all
		// session policy, so it is never handed on; it lasts a minute.
		if _, err := s.gcpToken(ctx, r, time.Minute); err != nil {
			return "", gcpRoleErr(mode, r, err)
		}
		return "service account " + r.ServiceAccount, nil
	}
	if s.Config.Format == stackconfig.FormatLocal || r.ARN == "" {
		return "", nil
	}
	if _, err := s.assume(ctx, r, "preflight", MinSession, DenyAllPolicy); err != nil {
		return "", fmt.Errorf("assume the %s role %s (%s): %w; check that the stack's %s is true and the role exists", mode, r.Name, r.ARN, awsErr(err), r.Parameter)
	}
	return r.ARN, nil
}

// awsErr shortens an SDK error to its API code and message when it has
// them (the SDK's own text repeats the operation and request ids).
func awsErr(err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return fmt.Errorf("%s: %s", ae.ErrorCode(), ae.ErrorMessage())
	}
	return err
}

// PreflightRepository is the repository CheckRegistry starts (and
// cancels) an upload to.
const PreflightRepository = "byoc-preflight"

// CheckRegistry checks, on an Azure or Google Cloud stack, that mode's
// identity may push to the install registry, as the image, helm and
// terraform types do: with the credentials a job of mode gets, it starts
// an upload and cancels it (nothing is written). It returns what it
// checked; ok is false for a stack whose registry takes no cloud
// identity (AWS, local).
func (s *Stack) CheckRegistry(ctx context.Context, mode string) (checked string, ok bool, err error) {
	c := s.Config
	if c.Registry == "" || (c.Format != stackconfig.FormatAzure && c.Format != stackconfig.FormatGCP) {
		return "", false, nil
	}
	reg, err := ocicopy.ParseRegistry(c.Registry)
	if err != nil {
		return "", true, fmt.Errorf("the stack's registry %q: %w", c.Registry, err)
	}
	creds, err := s.Assume(ctx, mode, "", "preflight", time.Minute, time.Time{})
	if err != nil {
		return "", true, err
	}
	if err := ocicopy.CheckWritable(ctx, reg, PreflightRepository, ocicopy.CredentialsFromEnv(creds.Env, InstallRegistryEnv)); err != nil {
		return "", true, err
	}
	return fmt.Sprintf("%s may push to %s (an upload started and cancelled)", creds.RoleARN, reg), true, nil
}
