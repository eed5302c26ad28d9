package stack_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/byoc-dev/byoc/agentd/stack"
	"github.com/byoc-dev/byoc/agentd/stack/awsfake"
	"github.com/byoc-dev/byoc/internal/stackconfig"
)

const (
	agentKey   = "AKIAAGENTKEY0001"
	agentSec   = "agent-own-secret-key"
	provARN    = "arn:aws:iam::123456789012:role/acme-ProvisionRole"
	maintARN   = "arn:aws:iam::123456789012:role/acme-MaintenanceRole"
	bgARN      = "arn:aws:iam::123456789012:role/acme-BreakGlassAdminRole"
	tokenARN   = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:byoc/acme/enrollment"
	emailARN   = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:acme-InputAdminEmailValue"
	licenseARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:acme-SecretLicenseKeyValue"
)

// clockedStack is a CloudFormation stack whose agent may assume role,
// with the fake's and the stack's clocks on one settable clock at
// 2026-11-27 12:00 UTC.
func clockedStack(t *testing.T, role string) (*awsfake.AWS, *clock, *stack.Stack) {
	t.Helper()
	fake := awsfake.New(t)
	fake.AddRole(role, agentKey)
	fake.PutSecret(licenseARN, "LK-1")
	clk := &clock{t: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	fake.Now = clk.Now
	s := cfnStack(t, fake, nil)
	s.Now = clk.Now
	return fake, clk, s
}

// cfnStack writes a CloudFormation stack config pointing at the fake and
// opens it with the agent's own credentials in the environment.
func cfnStack(t *testing.T, fake *awsfake.AWS, edit func(*stackconfig.Config)) *stack.Stack {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", agentKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", agentSec)
	t.Setenv("AWS_SESSION_TOKEN", "")
	domain := "acme.example.com"
	c := stackconfig.Config{Version: 1, Format: "cloudformation", Install: "acme", IMS: "https://ims.example.com", Region: "eu-west-1",
		EnrollToken: stackconfig.Source{SecretARN: tokenARN, Parameter: "EnrollmentTokenSecretArn"},
		Modes: map[string]stackconfig.Role{
			"provision":   {Enabled: true, ARN: provARN, Name: "ProvisionRole", Parameter: "EnableProvision"},
			"maintenance": {Enabled: true, ARN: maintARN, Name: "MaintenanceRole", Parameter: "EnableMaintenance"},
			"deprovision": {Enabled: false, Name: "DeprovisionRole", Parameter: "EnableDeprovision"},
			"break_glass": {Enabled: true, ARN: maintARN, Name: "BreakGlassRole", Parameter: "EnableBreakGlass"},
		},
		BreakGlassRoles: map[string]stackconfig.Role{"admin": {Enabled: true, ARN: bgARN, Name: "BreakGlassAdminRole", Parameter: "EnableBreakGlass"}},
		Inputs: map[string]stackconfig.Input{
			"admin_email": {Sensitive: true, Parameter: "InputAdminEmail", From: &stackconfig.Source{SecretARN: emailARN}},
			"region_hint": {Parameter: "InputRegionHint", Value: &domain},
			"unset_one":   {Parameter: "InputUnsetOne", From: &stackconfig.Source{}},
		},
		Secrets:   map[string]stackconfig.Source{"license_key": {SecretARN: licenseARN, Parameter: "SecretLicenseKey"}},
		Endpoints: map[string]string{"sts": fake.STS.URL, "secretsmanager": fake.SecretsManager.URL},
	}
	if edit != nil {
		edit(&c)
	}
	b, _ := json.Marshal(c)
	path := filepath.Join(t.TempDir(), "stack.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := stack.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAssumeRolePerMode(t *testing.T) {
	fake := awsfake.New(t)
	fake.AddRole(provARN, agentKey)
	fake.AddRole(bgARN, agentKey)
	s := cfnStack(t, fake, nil)
	ctx := context.Background()

	creds, err := s.Assume(ctx, "provision", "", "job_01H/x", 10*time.Minute, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	issued := fake.Issued()
	if len(issued) != 1 || issued[0].RoleARN != provARN || issued[0].SessionName != "byoc-job_01H-x" || issued[0].Duration != 15*time.Minute {
		t.Fatalf("STS issued %+v", issued)
	}
	if creds.Env["AWS_ACCESS_KEY_ID"] != issued[0].AccessKeyID || creds.Env["AWS_SECRET_ACCESS_KEY"] != issued[0].SecretAccessKey ||
		creds.Env["AWS_SESSION_TOKEN"] != issued[0].SessionToken || creds.Env["AWS_REGION"] != "eu-west-1" {
		t.Errorf("env %v, issued %+v", creds.Env, issued[0])
	}
	for _, v := range creds.Env {
		if v == agentKey || v == agentSec {
			t.Errorf("the agent's own credentials reached the job's env: %v", creds.Env)
		}
	}
	if len(creds.Secret) != 2 {
		t.Errorf("values to redact: %v", creds.Secret)
	}
	// The call was signed with the agent's own key.
	if calls := fake.Calls(); calls[0].AccessKeyID != agentKey || calls[0].Params.Get("RoleArn") != provARN {
		t.Errorf("calls: %+v", calls)
	}

	// A long job's session is capped at an hour (role chaining), and a
	// break-glass grant's role is used until the grant ends.
	if _, err := s.Assume(ctx, "provision", "", "j2", 3*time.Hour, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if d := fake.Issued()[1].Duration; d != time.Hour {
		t.Errorf("3h job: session %v, want 1h", d)
	}
	if _, err := s.Assume(ctx, "break_glass", "admin", "j3", time.Hour, time.Now().Add(20*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if is := fake.Issued()[2]; is.RoleARN != bgARN || is.Duration > 20*time.Minute || is.Duration < 19*time.Minute {
		t.Errorf("break-glass: %+v", is)
	}

	// A disabled mode fails naming the role and the parameter.
	_, err = s.Assume(ctx, "deprovision", "", "j4", time.Minute, time.Time{})
	var re *stack.RoleError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "DeprovisionRole") || !strings.Contains(err.Error(), "EnableDeprovision=true") {
		t.Errorf("disabled mode: %v", err)
	}
	// A role the stack names but the account refuses (deleted, or the
	// trust changed): STS's AccessDenied, the role and the parameter.
	_, err = s.Assume(ctx, "maintenance", "", "j5", time.Minute, time.Time{})
	if err == nil || !strings.Contains(err.Error(), "AccessDenied") || !strings.Contains(err.Error(), maintARN) || !strings.Contains(err.Error(), "EnableMaintenance") {
		t.Errorf("refused role: %v", err)
	}
}

func TestValuesFromSecretsManager(t *testing.T) {
	fake := awsfake.New(t)
	fake.PutSecret(tokenARN, "byoc_enr_secret.kid\n")
	fake.PutSecret(emailARN, "ops@acme.example")
	fake.PutSecret(licenseARN, "LK-123")
	s := cfnStack(t, fake, nil)
	ctx := context.Background()
	tok, err := s.EnrollToken(ctx)
	if err != nil || tok != "byoc_enr_secret.kid" {
		t.Fatalf("token %q, %v", tok, err)
	}
	v, err := s.Values(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v.Inputs["admin_email"] != "ops@acme.example" || v.Secrets["license_key"] != "LK-123" || v.Inputs["region_hint"] != "acme.example.com" {
		t.Errorf("values %+v", v)
	}
	want := map[string]string{"admin_email": "set", "region_hint": "acme.example.com"}
	if len(v.Report) != len(want) || v.Report["admin_email"] != "set" || v.Report["region_hint"] != want["region_hint"] {
		t.Errorf("report %v, want %v", v.Report, want)
	}
	if strings.Join(v.Sensitive, ",") != "ops@acme.example,LK-123" {
		t.Errorf("sensitive %v", v.Sensitive)
	}

	// A missing secret names the input and its parameter.
	s = cfnStack(t, fake, func(c *stackconfig.Config) {
		c.Inputs["admin_email"] = stackconfig.Input{Sensitive: true, Parameter: "InputAdminEmail", From: &stackconfig.Source{SecretARN: emailARN + "-gone"}}
	})
	if _, err := s.Values(ctx); err == nil || !strings.Contains(err.Error(), "InputAdminEmail") || !strings.Contains(err.Error(), "ResourceNotFoundException") {
		t.Errorf("missing secret: %v", err)
	}
}

func TestLocalStack(t *testing.T) {
	dir := t.TempDir()
	v := "eu"
	c := stackconfig.Config{Version: 1, Format: "local", Install: "acme", IMS: "http://127.0.0.1:1",
		EnrollToken: stackconfig.Source{File: "enroll.token"}, SecretsFile: "secrets.env",
		Modes:   map[string]stackconfig.Role{"provision": {Enabled: true, Parameter: "EnableProvision"}, "maintenance": {Enabled: false, Name: "local maintenance", Parameter: "EnableMaintenance"}},
		Inputs:  map[string]stackconfig.Input{"admin_email": {Sensitive: true, Parameter: "InputAdminEmail"}, "region": {Value: &v}},
		Secrets: map[string]stackconfig.Source{"license_key": {File: "secrets.env"}}}
	b, _ := json.Marshal(c)
	for name, data := range map[string]string{"stack.json": string(b), "secrets.env": "admin_email=a@b.c\nlicense_key=LK\n", "enroll.token": "byoc_enr_x.k\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s, err := stack.Open(filepath.Join(dir, "stack.json"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if tok, err := s.EnrollToken(ctx); err != nil || tok != "byoc_enr_x.k" {
		t.Errorf("token %q %v", tok, err)
	}
	vals, err := s.Values(ctx)
	if err != nil || vals.Inputs["admin_email"] != "a@b.c" || vals.Secrets["license_key"] != "LK" || vals.Report["admin_email"] != "set" || vals.Report["region"] != "eu" {
		t.Errorf("values %+v %v", vals, err)
	}
	creds, err := s.Assume(ctx, "provision", "", "j", time.Minute, time.Time{})
	if err != nil || len(creds.Env) != 0 {
		t.Errorf("local provision: %+v %v", creds, err)
	}
	if _, err := s.Assume(ctx, "maintenance", "", "j", time.Minute, time.Time{}); err == nil || !strings.Contains(err.Error(), "stack.json") || !strings.Contains(err.Error(), "EnableMaintenance") {
		t.Errorf("local disabled mode: %v", err)
	}
	if _, err := s.Assume(ctx, "deprovision", "", "j", time.Minute, time.Time{}); err == nil || !strings.Contains(err.Error(), "EnableDeprovision") {
		t.Errorf("local missing mode: %v", err)
	}
	os.Chmod(filepath.Join(dir, "enroll.token"), 0o644)
	if _, err := s.EnrollToken(ctx); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable token file: %v", err)
	}
}

// clock is a settable clock shared by the stack and the fake.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time)     { c.mu.Lock(); c.t = t; c.mu.Unlock() }
func (c *clock) Add(d time.Duration) { c.Set(c.Now().Add(d)) }

// readWith reads licenseARN from the fake's Secrets Manager with a job's
// credentials, through the real SDK client, as the job's own tools would.
func readWith(t *testing.T, fake *awsfake.AWS, creds stack.Credentials) error {
	t.Helper()
	cfg := aws.Config{Region: "eu-west-1", Credentials: credentials.NewStaticCredentialsProvider(
		creds.Env["AWS_ACCESS_KEY_ID"], creds.Env["AWS_SECRET_ACCESS_KEY"], creds.Env["AWS_SESSION_TOKEN"])}
	c := secretsmanager.NewFromConfig(cfg, func(o *secretsmanager.Options) { o.BaseEndpoint = aws.String(fake.SecretsManager.URL) })
	_, err := c.GetSecretValue(context.Background(), &secretsmanager.GetSecretValueInput{SecretId: aws.String(licenseARN)})
	return err
}

// Break-glass credentials end when the grant ends, whatever STS says:
// STS never issues less than 15 minutes, so a grant with 2 minutes left
// gets a 15-minute session, and the session policy the agent sends with
// AssumeRole denies everything from the grant's end. The fake enforces
// the policy at its clock on a call made through the real SDK.
func TestBreakGlassCredentialsEndWithTheGrant(t *testing.T) {
	for _, left := range []time.Duration{2 * time.Minute, 14*time.Minute + 59*time.Second, 15 * time.Minute, 15*time.Minute + time.Second, 20 * time.Minute} {
		t.Run(left.String(), func(t *testing.T) {
			fake, clk, s := clockedStack(t, bgARN)
			start := clk.Now()
			until := start.Add(left)

			creds, err := s.Assume(context.Background(), "break_glass", "admin", "job_bg", time.Hour, until)
			if err != nil {
				t.Fatal(err)
			}
			is := fake.Issued()[0]
			if want := max(left, stack.MinSession); is.Duration != want {
				t.Errorf("STS session %v, want %v", is.Duration, want)
			}
			if !creds.Expires.Equal(until) || creds.Env["AWS_CREDENTIAL_EXPIRATION"] != until.Format(time.RFC3339) {
				t.Errorf("credentials expire %v (env %s), want the grant's end %v", creds.Expires, creds.Env["AWS_CREDENTIAL_EXPIRATION"], until)
			}
			if err := readWith(t, fake, creds); err != nil {
				t.Fatalf("within the grant: %v", err)
			}
			clk.Set(until.Add(-time.Second))
			if err := readWith(t, fake, creds); err != nil {
				t.Fatalf("a second before the grant's end: %v", err)
			}
			clk.Set(until)
			err = readWith(t, fake, creds)
			if err == nil {
				t.Fatalf("at the grant's end (STS said until %v): the call was allowed", is.Expiration)
			}
			if left < stack.MinSession && !strings.Contains(err.Error(), "explicit deny in a session policy") {
				t.Errorf("at the grant's end, STS's session still running: %v", err)
			}
			clk.Add(time.Minute)
			if err := readWith(t, fake, creds); err == nil {
				t.Errorf("a minute after the grant's end: allowed")
			}
		})
	}
}

// A break-glass role is never assumed without a live grant: none, or
// one that has ended (expired or revoked), is refused before STS is
// called, naming the grant's end.
func TestBreakGlassNeedsALiveGrant(t *testing.T) {
	fake := awsfake.New(t)
	fake.AddRole(bgARN, agentKey)
	fake.AddRole(maintARN, agentKey)
	s := cfnStack(t, fake, nil)
	now := time.Now()
	s.Now = func() time.Time { return now }
	ended := now.Add(-time.Second)
	for name, tc := range map[string]struct {
		role  string
		until time.Time
		want  string
	}{
		"no grant, the mode's role": {"", time.Time{}, "only under a live break-glass grant"},
		"no grant, a grant role":    {"admin", time.Time{}, "only under a live break-glass grant"},
		"ended":                     {"admin", ended, "the grant ended at " + ended.UTC().Format(time.RFC3339)},
		"ending now":                {"admin", now, "the grant ended at"},
	} {
		_, err := s.Assume(context.Background(), "break_glass", tc.role, "j", time.Hour, tc.until)
		var ng *stack.NoGrantError
		if !errors.As(err, &ng) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a NoGrantError saying %q", name, err, tc.want)
		}
	}
	if n := len(fake.Calls()); n != 0 {
		t.Errorf("STS was called %d times without a live grant", n)
	}
}

// Every mode's credentials end with the job's time limit plus
// stack.JobGrace, by the same session policy, though STS gives at least
// 15 minutes.
func TestJobCredentialsEndWithTheTimeLimit(t *testing.T) {
	fake, clk, s := clockedStack(t, provARN)
	creds, err := s.Assume(context.Background(), "provision", "", "j", 2*time.Minute, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	end := clk.Now().Add(2*time.Minute + stack.JobGrace)
	if is := fake.Issued()[0]; is.Duration != stack.MinSession || is.Policy != stack.SessionPolicy(end) {
		t.Errorf("issued %v with policy %s", is.Duration, is.Policy)
	}
	clk.Set(end.Add(-time.Second))
	if err := readWith(t, fake, creds); err != nil {
		t.Fatalf("within the job's time: %v", err)
	}
	clk.Set(end)
	if err := readWith(t, fake, creds); err == nil || !strings.Contains(err.Error(), "explicit deny in a session policy") {
		t.Errorf("after the job's time limit: %v", err)
	}
}

// The revoke the customer runs by hand (docs/customer/credentials.md):
// an inline policy on the break-glass role denying sessions issued before
// the revocation (aws:TokenIssueTime), as the IAM console's "revoke
// active sessions" puts. Credentials issued before it stop working at
// once; the role assumed afterwards works.
func TestRevokeOlderSessions(t *testing.T) {
	fake, clk, s := clockedStack(t, bgARN)
	old, err := s.Assume(context.Background(), "break_glass", "admin", "j1", time.Hour, clk.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Minute)
	revoke := `{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Action":"*","Resource":"*","Condition":{"DateLessThan":{"aws:TokenIssueTime":"` +
		clk.Now().Format(time.RFC3339) + `"}}}]}`
	if err := fake.PutRolePolicy(bgARN, "AWSRevokeOlderSessions", revoke); err != nil {
		t.Fatal(err)
	}
	if err := readWith(t, fake, old); err == nil || !strings.Contains(err.Error(), "explicit deny in an identity-based policy") {
		t.Errorf("a session older than the revocation: %v", err)
	}
	clk.Add(time.Second)
	fresh, err := s.Assume(context.Background(), "break_glass", "admin", "j2", time.Hour, clk.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := readWith(t, fake, fresh); err != nil {
		t.Errorf("a session newer than the revocation: %v", err)
	}
}

// A stack config's session tags (the install's name and labels) go with
// every AssumeRole, a job's and preflight's, through the real STS client:
// the fake receives them as STS would. Without them, none are sent.
func TestAssumeRolePassesSessionTags(t *testing.T) {
	fake := awsfake.New(t)
	fake.AddRole(provARN, agentKey)
	tags, left := stackconfig.SessionTags("acme", map[string]string{"customer": "acme", "env": "prod", "example.com/" + strings.Repeat("x", 120): "long"})
	if len(left) != 1 {
		t.Fatalf("SessionTags left out %v, want the label whose tag key is over 128 characters", left)
	}
	s := cfnStack(t, fake, func(c *stackconfig.Config) { c.SessionTags = tags })
	ctx := context.Background()
	if _, err := s.Assume(ctx, "provision", "", "job_1", 10*time.Minute, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CheckRole(ctx, "provision", ""); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"byoc:install": "acme", "byoc:label:customer": "acme", "byoc:label:env": "prod"}
	for i, is := range fake.Issued() {
		if !maps.Equal(is.Tags, want) {
			t.Errorf("AssumeRole %d: session tags %v, want %v", i, is.Tags, want)
		}
	}

	plain := cfnStack(t, fake, nil)
	if _, err := plain.Assume(ctx, "provision", "", "job_2", 10*time.Minute, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if is := fake.Issued(); is[len(is)-1].Tags != nil {
		t.Errorf("a stack config without session_tags sent tags %v", is[len(is)-1].Tags)
	}
}

// A stack config with session tags AWS would refuse is refused when
// read, naming the key.
func TestSessionTagsAreChecked(t *testing.T) {
	base := func() stackconfig.Config {
		return stackconfig.Config{Version: stackconfig.Version, Format: stackconfig.FormatCloudFormation, Install: "acme", IMS: "https://ims.example.com",
			EnrollToken: stackconfig.Source{SecretARN: "arn:aws:secretsmanager:eu-west-1:123456789012:secret:t", Parameter: "EnrollmentTokenSecretArn"}}
	}
	many := map[string]string{}
	for i := range 51 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	for name, tc := range map[string]struct {
		tags map[string]string
		want string
	}{
		"too many":   {many, "51 tags, AWS allows at most 50"},
		"long key":   {map[string]string{strings.Repeat("k", 129): "v"}, "1 to 128 characters"},
		"long value": {map[string]string{"k": strings.Repeat("v", 257)}, "at most 256 characters"},
		"charset":    {map[string]string{"k": "a;b"}, `value of "k": only letters`},
		"aws prefix": {map[string]string{"aws:x": "v"}, "the aws: prefix"},
		"case":       {map[string]string{"Env": "a", "env": "b"}, "differ only in case"},
	} {
		c := base()
		c.SessionTags = tc.tags
		b, _ := json.Marshal(c)
		_, err := stackconfig.Parse(b)
		if err == nil || !strings.Contains(err.Error(), "session_tags: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want session_tags: ...%s", name, err, tc.want)
		}
	}
}
