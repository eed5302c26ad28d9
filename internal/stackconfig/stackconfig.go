// Package stackconfig is the file an install stack writes for its agent
// (`agentd --stack-config FILE`): where imsd is and which key it signs
// with, where the enrolment token is, the role of each permission mode
// and the stack parameter that turns it on, the customer's inputs and
// secrets (values, or where to read them), and the install's registry.
//
// Both stack formats write it: a CloudFormation stack from its user data,
// with the values of its parameters and resources, and a local stack
// (`byoc install stack --format local`) as a file beside its script. It
// holds no secret value itself in a CloudFormation stack (those are
// Secrets Manager ARNs); a local stack points at files of its own.
//
// It imports only the standard library, so the CLI (which writes it) and
// agentd (which reads it) share it without linking each other.
package stackconfig

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
)

// Version is the format's version; a file of another version is refused.
const Version = 1

// The formats of an install stack.
const (
	FormatCloudFormation = "cloudformation"
	FormatLocal          = "local"
	FormatAzure          = "azure"
	FormatGCP            = "gcp"
)

// Modes are the permission modes, in the order they are shown.
var Modes = []string{"provision", "maintenance", "deprovision", "break_glass"}

// Config is an install stack's description of itself for its agent.
type Config struct {
	Version int `json:"version"`
	// Format is cloudformation, azure, gcp or local.
	Format string `json:"format"`
	// Stack names the stack (the CloudFormation stack name, or the local
	// stack's directory), for messages and the support bundle.
	Stack string `json:"stack,omitempty"`
	// Install is the install's name.
	Install string `json:"install"`
	// IMS is imsd's URL as the agent reaches it.
	IMS string `json:"ims"`
	// IMSKeyID is the fingerprint of imsd's job signing key
	// (agentproto.KeyID) that the enrolment token must name.
	IMSKeyID string `json:"ims_key_id,omitempty"`
	// Region is the AWS region of a CloudFormation stack.
	Region string `json:"region,omitempty"`
	// EnrollToken is where the single-use enrolment token is: a Secrets
	// Manager secret (never a plain parameter) or a local file.
	EnrollToken Source `json:"enroll_token"`
	// Modes is the role of each permission mode, by mode name.
	Modes map[string]Role `json:"modes"`
	// BreakGlassRoles are the roles of break_glass.toml, by name; a
	// break-glass job uses its grant's role if it is here, else
	// Modes["break_glass"].
	BreakGlassRoles map[string]Role `json:"break_glass_roles,omitempty"`
	// Inputs are the customer-provided inputs, by name.
	Inputs map[string]Input `json:"inputs,omitempty"`
	// Secrets are the app's secrets (secrets.toml), by name.
	Secrets map[string]Source `json:"secrets,omitempty"`
	// SecretsFile is a local stack's secrets file (NAME=value lines, only
	// its owner may read it): the values of the app's secrets, and of
	// sensitive inputs that have neither Value nor From, by name.
	SecretsFile string `json:"secrets_file,omitempty"`
	// Registry is the install's container registry (an ECR repository
	// URI, or a local registry's host:port/path).
	Registry string `json:"registry,omitempty"`
	// Outputs are what the stack made (its CloudFormation outputs), which
	// the agent reports to imsd.
	Outputs map[string]string `json:"outputs,omitempty"`
	// Kubernetes says the app has helm components: agentd preflight then
	// fails without a reachable cluster (a kubeconfig, or the in-cluster
	// config of the agent's pod).
	Kubernetes bool `json:"kubernetes,omitempty"`
	// Endpoints override the service endpoints (tests, private
	// endpoints), by service: sts, secretsmanager (cloudformation);
	// keyvault (azure: the vault's URL as the agent reaches it);
	// iamcredentials, secretmanager (gcp: the APIs' base URLs).
	Endpoints map[string]string `json:"endpoints,omitempty"`
	// Azure is an Azure stack's account: required in format azure,
	// refused in the others.
	Azure *Azure `json:"azure,omitempty"`
	// GCP is a Google Cloud stack's project: required in format gcp,
	// refused in the others.
	GCP *GCP `json:"gcp,omitempty"`
	// SessionTags are the STS session tags the agent passes on every
	// AssumeRole of a cloudformation stack (the install's name and
	// labels, as the stack's resources are tagged), so the customer's
	// CloudTrail and IAM conditions (aws:PrincipalTag) see which install
	// a job's session is for. A stack writes it only when its roles'
	// trust policies allow sts:TagSession; without it, no tags are sent.
	// At most MaxSessionTags, within AWS's key and value limits.
	SessionTags map[string]string `json:"session_tags,omitempty"`
	// EgressLedger sets the agent's egress ledger (agentd egress list)
	// as its --egress-ledger-* flags do; a flag given on the command
	// line wins.
	EgressLedger *EgressLedger `json:"egress_ledger,omitempty"`
}

// EgressLedger is the egress ledger's settings in a stack config.
type EgressLedger struct {
	// Content is what the ledger keeps in full besides each message's
	// kind, size and hash: logs, outputs or logs,outputs
	// (--egress-ledger-content); "" keeps none.
	Content string `json:"content,omitempty"`
	// MaxBytes is the size at which its file rotates
	// (--egress-ledger-max-bytes); 0 is the agent's default.
	MaxBytes int64 `json:"max_bytes,omitempty"`
}

// check reports the first problem of e, naming its key.
func (e *EgressLedger) check() error {
	if e.Content != "" {
		for w := range strings.SplitSeq(e.Content, ",") {
			if w = strings.TrimSpace(w); w != "logs" && w != "outputs" {
				return fmt.Errorf("egress_ledger.content: %q is not a content kind (want logs, outputs, or both comma-separated)", w)
			}
		}
	}
	if e.MaxBytes < 0 || (e.MaxBytes > 0 && e.MaxBytes < 1<<20) {
		return fmt.Errorf("egress_ledger.max_bytes: %d; want at least 1 MiB (1048576), or 0 for the default", e.MaxBytes)
	}
	return nil
}

// AWS's limits on session tags (STS AssumeRole Tags).
const (
	MaxSessionTags        = 50
	MaxSessionTagKeyLen   = 128
	MaxSessionTagValueLen = 256
)

// tagRE is the characters AWS allows in a tag key or value: letters,
// digits, spaces and _ . : / = + - @.
var tagRE = regexp.MustCompile(`^[\p{L}\p{Z}\p{N}_.:/=+\-@]*$`)

// SessionTags returns the session tags of install with labels: byoc:install
// and byoc:label:KEY for each label, by key, leaving out what AWS would
// refuse (a key over 128 characters or with other characters, a value
// over 256) and, past 50 tags, the labels last by key. left names the
// labels left out.
func SessionTags(install string, labels map[string]string) (tags map[string]string, left []string) {
	tags = map[string]string{"byoc:install": install}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		key, v := "byoc:label:"+k, labels[k]
		if len(tags) >= MaxSessionTags || checkTag(key, v) != nil {
			left = append(left, k)
			continue
		}
		tags[key] = v
	}
	return tags, left
}

// checkTag reports why AWS would refuse a session tag.
func checkTag(k, v string) error {
	switch {
	case k == "" || len(k) > MaxSessionTagKeyLen:
		return fmt.Errorf("key %q: 1 to %d characters", k, MaxSessionTagKeyLen)
	case strings.HasPrefix(strings.ToLower(k), "aws:"):
		return fmt.Errorf("key %q: the aws: prefix is AWS's", k)
	case !tagRE.MatchString(k):
		return fmt.Errorf("key %q: only letters, digits, spaces and _ . : / = + - @", k)
	case len(v) > MaxSessionTagValueLen:
		return fmt.Errorf("value of %q: at most %d characters", k, MaxSessionTagValueLen)
	case !tagRE.MatchString(v):
		return fmt.Errorf("value of %q: only letters, digits, spaces and _ . : / = + - @", k)
	}
	return nil
}

// checkSessionTags reports the first session tag AWS would refuse.
func (c *Config) checkSessionTags() error {
	if len(c.SessionTags) == 0 {
		return nil
	}
	if c.Format != FormatCloudFormation {
		return fmt.Errorf("session_tags: only a cloudformation stack passes session tags (this one is %s)", c.Format)
	}
	if len(c.SessionTags) > MaxSessionTags {
		return fmt.Errorf("session_tags: %d tags, AWS allows at most %d", len(c.SessionTags), MaxSessionTags)
	}
	lower := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(c.SessionTags)) {
		if err := checkTag(k, c.SessionTags[k]); err != nil {
			return fmt.Errorf("session_tags: %w", err)
		}
		// STS treats tag keys case-insensitively.
		if prev, ok := lower[strings.ToLower(k)]; ok {
			return fmt.Errorf("session_tags: keys %q and %q differ only in case, which AWS refuses", prev, k)
		}
		lower[strings.ToLower(k)] = k
	}
	return nil
}

// Azure is where an Azure install stack is and what the agent itself
// uses there. Each permission mode's identity is a user-assigned managed
// identity attached to the agent's VM (Role.ClientID).
type Azure struct {
	// TenantID and SubscriptionID are the customer's directory and
	// subscription (GUIDs); ResourceGroup is the install's.
	TenantID       string `json:"tenant_id"`
	SubscriptionID string `json:"subscription_id"`
	ResourceGroup  string `json:"resource_group"`
	// AgentClientID is the client id of the agent's own user-assigned
	// managed identity, which reads Key Vault (and nothing else).
	AgentClientID string `json:"agent_client_id"`
	// KeyVaultURL is the stack's Key Vault (https://NAME.vault.azure.net/),
	// which holds the enrolment token, sensitive inputs and secrets.
	KeyVaultURL string `json:"key_vault_url"`
}

// GCP is where a Google Cloud install stack is and what the agent
// itself runs as there. Each permission mode's identity is a service
// account (Role.ServiceAccount) that the agent's own service account may
// impersonate (roles/iam.serviceAccountTokenCreator on it, and nothing
// else): the agent gets a short-lived token of it per job through the
// IAM Credentials API.
type GCP struct {
	// Project is the install's project id; Region its region.
	Project string `json:"project"`
	Region  string `json:"region,omitempty"`
	// AgentServiceAccount is the email of the agent VM's own service
	// account, which reads Secret Manager and impersonates the modes'.
	AgentServiceAccount string `json:"agent_service_account"`
}

// Role is the cloud role of a permission mode (or a break-glass role).
type Role struct {
	// Enabled is the stack parameter's value: a disabled mode has no
	// role, and its jobs fail naming Parameter.
	Enabled bool `json:"enabled"`
	// ARN is the IAM role the agent assumes for the mode's jobs (empty in
	// a local stack, where jobs get no cloud credentials).
	ARN string `json:"arn,omitempty"`
	// ClientID is, in an Azure stack, the client id of the mode's
	// user-assigned managed identity.
	ClientID string `json:"client_id,omitempty"`
	// ServiceAccount is, in a Google Cloud stack, the email of the mode's
	// service account, which the agent impersonates.
	ServiceAccount string `json:"service_account,omitempty"`
	// Name is the role's name, for messages.
	Name string `json:"name,omitempty"`
	// Parameter is the stack parameter that turns the role on.
	Parameter string `json:"parameter"`
}

// Input is a customer-provided input as the stack holds it.
type Input struct {
	// Sensitive inputs are reported to imsd only as "set".
	Sensitive bool `json:"sensitive,omitempty"`
	// Parameter is the stack parameter the customer fills.
	Parameter string `json:"parameter,omitempty"`
	// Value is a value the stack holds itself (a non-sensitive input).
	Value *string `json:"value,omitempty"`
	// From is where a value kept out of the stack is (a sensitive one).
	From *Source `json:"from,omitempty"`
}

// Source is where a value is kept: exactly one of the fields is set.
type Source struct {
	// SecretARN is a Secrets Manager secret whose SecretString is the value.
	SecretARN string `json:"secret_arn,omitempty"`
	// KeyVaultSecret is the name of a secret in an Azure stack's Key
	// Vault (its latest version is the value).
	KeyVaultSecret string `json:"key_vault_secret,omitempty"`
	// GCPSecret is the id of a Secret Manager secret in a Google Cloud
	// stack's project (its latest version is the value).
	GCPSecret string `json:"gcp_secret,omitempty"`
	// File is a local file holding the value (trailing newline removed),
	// readable by its owner only.
	File string `json:"file,omitempty"`
	// Parameter is the stack parameter the customer fills, for messages.
	Parameter string `json:"parameter,omitempty"`
}

// IsZero reports whether s names no place.
func (s Source) IsZero() bool {
	return s.SecretARN == "" && s.File == "" && s.KeyVaultSecret == "" && s.GCPSecret == ""
}

func (s Source) String() string {
	switch {
	case s.SecretARN != "":
		return "Secrets Manager secret " + s.SecretARN
	case s.File != "":
		return "file " + s.File
	case s.KeyVaultSecret != "":
		return "Key Vault secret " + s.KeyVaultSecret
	case s.GCPSecret != "":
		return "Secret Manager secret " + s.GCPSecret
	}
	return "nowhere"
}

var (
	nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	arnRE  = regexp.MustCompile(`^arn:[a-z0-9-]+:[a-z0-9-]+:[a-z0-9-]*:[0-9]*:.+$`)
	guidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	// kvNameRE is a Key Vault secret's name.
	kvNameRE = regexp.MustCompile(`^[0-9A-Za-z-]{1,127}$`)
	// rgRE is a resource group's name.
	rgRE = regexp.MustCompile(`^[-\w._()]{1,90}$`)
	// gcpProjectRE is a Google Cloud project id; gcpSecretRE a Secret
	// Manager secret id; gcpSARE a service account's email.
	gcpProjectRE = regexp.MustCompile(`^[a-z][-a-z0-9]{4,28}[a-z0-9]$`)
	gcpSecretRE  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)
	gcpSARE      = regexp.MustCompile(`^[a-z][-a-z0-9]{4,28}[a-z0-9]@[a-z][-a-z0-9.:]*\.iam\.gserviceaccount\.com$`)
	gcpRegionRE  = regexp.MustCompile(`^[a-z]+-[a-z]+[0-9]+$`)
)

// Read reads and checks the file at path.
func Read(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("stack config: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("stack config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes and checks a stack config; unknown keys are refused, and
// errors name the key.
func Parse(b []byte) (*Config, error) {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, err
	}
	return &c, c.Check()
}

// Check reports the first problem of c, naming its key.
func (c *Config) Check() error {
	if c.Version != Version {
		return fmt.Errorf("version: %d, this agent reads version %d", c.Version, Version)
	}
	if c.Format != FormatCloudFormation && c.Format != FormatLocal && c.Format != FormatAzure && c.Format != FormatGCP {
		return fmt.Errorf("format: %q, want %s, %s, %s or %s", c.Format, FormatCloudFormation, FormatAzure, FormatGCP, FormatLocal)
	}
	if err := c.checkAzure(); err != nil {
		return err
	}
	if err := c.checkGCP(); err != nil {
		return err
	}
	if err := c.checkSessionTags(); err != nil {
		return err
	}
	if c.Install == "" {
		return fmt.Errorf("install: is required")
	}
	if !strings.HasPrefix(c.IMS, "http://") && !strings.HasPrefix(c.IMS, "https://") {
		return fmt.Errorf("ims: %q is not an http(s) URL", c.IMS)
	}
	if err := c.EnrollToken.check("enroll_token", c.Format); err != nil {
		return err
	}
	for name, r := range c.Modes {
		if !slices.Contains(Modes, name) {
			return fmt.Errorf("modes.%s: unknown permission mode (want %s)", name, strings.Join(Modes, ", "))
		}
		if err := r.check("modes."+name, c.Format); err != nil {
			return err
		}
	}
	for name, r := range c.BreakGlassRoles {
		if err := r.check("break_glass_roles."+name, c.Format); err != nil {
			return err
		}
	}
	for name, in := range c.Inputs {
		key := "inputs." + name
		if !nameRE.MatchString(name) {
			return fmt.Errorf("%s: not a name of letters, digits and _", key)
		}
		switch {
		case in.Value != nil && in.From != nil:
			return fmt.Errorf("%s: set value or from, not both", key)
		case in.From != nil:
			if err := in.From.check(key+".from", c.Format); err != nil {
				return err
			}
		case in.Sensitive && in.Value != nil && c.Format != FormatLocal:
			return fmt.Errorf("%s: a sensitive input is read from a secret, never held in the stack config", key)
		}
	}
	for name, s := range c.Secrets {
		if !nameRE.MatchString(name) {
			return fmt.Errorf("secrets.%s: not a name of letters, digits and _", name)
		}
		if err := s.check("secrets."+name, c.Format); err != nil {
			return err
		}
	}
	for svc, u := range c.Endpoints {
		switch {
		case c.Format == FormatAzure && svc != "keyvault":
			return fmt.Errorf("endpoints.%s: unknown service of an azure stack (want keyvault)", svc)
		case c.Format == FormatGCP && svc != "iamcredentials" && svc != "secretmanager":
			return fmt.Errorf("endpoints.%s: unknown service of a gcp stack (want iamcredentials or secretmanager)", svc)
		case c.Format != FormatAzure && c.Format != FormatGCP && svc != "sts" && svc != "secretsmanager":
			return fmt.Errorf("endpoints.%s: unknown service (want sts or secretsmanager)", svc)
		}
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return fmt.Errorf("endpoints.%s: %q is not an http(s) URL", svc, u)
		}
	}
	if c.EgressLedger != nil {
		return c.EgressLedger.check()
	}
	return nil
}

func (s Source) check(key, format string) error {
	n := 0
	for _, v := range []string{s.SecretARN, s.File, s.KeyVaultSecret, s.GCPSecret} {
		if v != "" {
			n++
		}
	}
	switch {
	case n > 1:
		return fmt.Errorf("%s: set one of secret_arn, key_vault_secret, gcp_secret or file", key)
	case s.SecretARN != "" && !arnRE.MatchString(s.SecretARN):
		return fmt.Errorf("%s.secret_arn: %q is not an ARN", key, s.SecretARN)
	case s.SecretARN != "" && format == FormatAzure:
		return fmt.Errorf("%s.secret_arn: an azure stack keeps its values in Key Vault (key_vault_secret)", key)
	case s.SecretARN != "" && format == FormatGCP:
		return fmt.Errorf("%s.secret_arn: a gcp stack keeps its values in Secret Manager (gcp_secret)", key)
	case s.GCPSecret != "" && format != FormatGCP:
		return fmt.Errorf("%s.gcp_secret: only a gcp stack has Google Secret Manager", key)
	case s.GCPSecret != "" && !gcpSecretRE.MatchString(s.GCPSecret):
		return fmt.Errorf("%s.gcp_secret: %q is not a Secret Manager secret id (letters, digits, _ and -, at most 255)", key, s.GCPSecret)
	case s.KeyVaultSecret != "" && format != FormatAzure:
		return fmt.Errorf("%s.key_vault_secret: only an azure stack has a Key Vault", key)
	case s.KeyVaultSecret != "" && !kvNameRE.MatchString(s.KeyVaultSecret):
		return fmt.Errorf("%s.key_vault_secret: %q is not a Key Vault secret name (letters, digits and -, at most 127)", key, s.KeyVaultSecret)
	}
	return nil
}

// checkAzure checks the azure block: required in an azure stack, refused
// elsewhere.
func (c *Config) checkAzure() error {
	a := c.Azure
	if c.Format != FormatAzure {
		if a != nil {
			return fmt.Errorf("azure: only a stack of format azure has it (this one is %s)", c.Format)
		}
		return nil
	}
	if a == nil {
		return fmt.Errorf("azure: is required in an azure stack")
	}
	for _, f := range []struct{ key, v string }{{"tenant_id", a.TenantID}, {"subscription_id", a.SubscriptionID}, {"agent_client_id", a.AgentClientID}} {
		if !guidRE.MatchString(f.v) {
			return fmt.Errorf("azure.%s: %q is not a GUID", f.key, f.v)
		}
	}
	if !rgRE.MatchString(a.ResourceGroup) {
		return fmt.Errorf("azure.resource_group: %q is not a resource group name", a.ResourceGroup)
	}
	if !strings.HasPrefix(a.KeyVaultURL, "https://") {
		return fmt.Errorf("azure.key_vault_url: %q is not an https URL", a.KeyVaultURL)
	}
	return nil
}

// checkGCP checks the gcp block: required in a gcp stack, refused
// elsewhere.
func (c *Config) checkGCP() error {
	g := c.GCP
	if c.Format != FormatGCP {
		if g != nil {
			return fmt.Errorf("gcp: only a stack of format gcp has it (this one is %s)", c.Format)
		}
		return nil
	}
	if g == nil {
		return fmt.Errorf("gcp: is required in a gcp stack")
	}
	if !gcpProjectRE.MatchString(g.Project) {
		return fmt.Errorf("gcp.project: %q is not a project id (6 to 30 lowercase letters, digits and -)", g.Project)
	}
	if g.Region != "" && !gcpRegionRE.MatchString(g.Region) {
		return fmt.Errorf("gcp.region: %q is not a region (like europe-west1)", g.Region)
	}
	if !gcpSARE.MatchString(g.AgentServiceAccount) {
		return fmt.Errorf("gcp.agent_service_account: %q is not a service account's email (NAME@PROJECT.iam.gserviceaccount.com)", g.AgentServiceAccount)
	}
	return nil
}

func (r Role) check(key, format string) error {
	if r.Parameter == "" {
		return fmt.Errorf("%s.parameter: is required (the stack parameter that turns the role on)", key)
	}
	if r.Enabled && format == FormatCloudFormation && !arnRE.MatchString(r.ARN) {
		return fmt.Errorf("%s.arn: %q is not a role ARN", key, r.ARN)
	}
	if r.ARN != "" && format == FormatAzure {
		return fmt.Errorf("%s.arn: an azure stack's roles are managed identities (client_id)", key)
	}
	if r.Enabled && format == FormatAzure && !guidRE.MatchString(r.ClientID) {
		return fmt.Errorf("%s.client_id: %q is not a managed identity's client id (a GUID)", key, r.ClientID)
	}
	if r.ClientID != "" && format != FormatAzure {
		return fmt.Errorf("%s.client_id: only an azure stack's roles are managed identities", key)
	}
	if r.ARN != "" && format == FormatGCP {
		return fmt.Errorf("%s.arn: a gcp stack's roles are service accounts (service_account)", key)
	}
	if r.Enabled && format == FormatGCP && !gcpSARE.MatchString(r.ServiceAccount) {
		return fmt.Errorf("%s.service_account: %q is not a service account's email (NAME@PROJECT.iam.gserviceaccount.com)", key, r.ServiceAccount)
	}
	if r.ServiceAccount != "" && format != FormatGCP {
		return fmt.Errorf("%s.service_account: only a gcp stack's roles are service accounts", key)
	}
	return nil
}

// ModeParameter is the stack parameter that turns mode's role on, in
// both formats: EnableProvision, EnableMaintenance, EnableDeprovision,
// EnableBreakGlass.
func ModeParameter(mode string) string { return "Enable" + Pascal(mode) }

// Pascal turns a snake_case name into PascalCase ("admin_email" →
// "AdminEmail"), the way stack parameters and resources are named.
func Pascal(s string) string {
	var b strings.Builder
	up := true
	for _, r := range s {
		switch {
		case r == '_' || r == '-' || r == '.':
			up = true
		case up:
			b.WriteString(strings.ToUpper(string(r)))
			up = false
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
