// Package awsfake is a local fake of the two AWS APIs the agent calls,
// for tests: STS (the query protocol: form-encoded POSTs, XML answers;
// AssumeRole and GetCallerIdentity) and Secrets Manager (the JSON 1.1
// protocol: X-Amz-Target, JSON answers; GetSecretValue), each an
// httptest server that the real aws-sdk-go-v2 clients reach through their
// BaseEndpoint. It is written here for byoc (no maintained fake fitted:
// they need Docker or Python); it models what the agent relies on, not
// AWS: who may assume which role, secrets by ARN or name, credentials
// that expire, the error shapes of both protocols, and the policies that
// bound an assumed role's credentials: AssumeRole's session policy (the
// Policy parameter) is kept with the credentials it issued, and a call
// signed with them (GetSecretValue) is refused, at the fake's clock,
// when they have expired or when the session policy, or an inline
// policy put on the role (PutRolePolicy, as a revoke of older sessions
// does), denies it or the session policy does not allow it. A role
// otherwise allows everything. KMS (kms.go) fakes the two calls of the
// build agent's KMS signing key, GetPublicKey and Sign. No binary links
// it.
package awsfake

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// AWS is the fake: one STS and one Secrets Manager endpoint.
type AWS struct {
	STS, SecretsManager *httptest.Server
	// Now is the fake's clock (time.Now when nil).
	Now func() time.Time

	mu sync.Mutex
	// roles maps a role ARN to the access key ids that may assume it.
	roles map[string]map[string]bool
	// secrets maps a secret's ARN and name to its value.
	secrets map[string]string
	// Calls records every call, "Service.Action key=value".
	calls []Call
	// issued are the credentials AssumeRole handed out.
	issued []Issued
	// rolePolicies are the inline policies put on each role, by name.
	rolePolicies map[string]map[string]*policy
}

// Call is one request the fake answered.
type Call struct {
	Service, Action string
	// AccessKeyID is the caller's, from the SigV4 Authorization header.
	AccessKeyID string
	// Params are the form parameters (STS) or the JSON body (Secrets
	// Manager) as text.
	Params url.Values
	Status int
}

// Issued is a set of credentials AssumeRole handed out.
type Issued struct {
	RoleARN, SessionName                       string
	AccessKeyID, SecretAccessKey, SessionToken string
	Expiration                                 time.Time
	Duration                                   time.Duration
	// IssuedAt is the fake's time at the call (aws:TokenIssueTime).
	IssuedAt time.Time
	// Policy is the session policy AssumeRole was given ("": none).
	Policy string
	// Tags are the session tags AssumeRole was given, by key (nil: none).
	Tags   map[string]string
	policy *policy
}

// New starts the fake; its servers close with the test.
func New(tb testing.TB) *AWS {
	tb.Helper()
	a := &AWS{roles: map[string]map[string]bool{}, secrets: map[string]string{}, rolePolicies: map[string]map[string]*policy{}}
	a.STS = httptest.NewServer(http.HandlerFunc(a.serveSTS))
	a.SecretsManager = httptest.NewServer(http.HandlerFunc(a.serveSecrets))
	tb.Cleanup(a.STS.Close)
	tb.Cleanup(a.SecretsManager.Close)
	return a
}

// AddRole lets the callers with these access key ids assume role arn.
func (a *AWS) AddRole(arn string, callers ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.roles[arn] == nil {
		a.roles[arn] = map[string]bool{}
	}
	for _, c := range callers {
		a.roles[arn][c] = true
	}
}

// PutRolePolicy puts (or replaces) inline policy name on role arn, as
// iam:PutRolePolicy does; a document the fake cannot evaluate is an
// error.
func (a *AWS) PutRolePolicy(arn, name, doc string) error {
	p, err := parsePolicy(doc)
	if err != nil {
		return fmt.Errorf("MalformedPolicyDocument: %v", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.rolePolicies[arn] == nil {
		a.rolePolicies[arn] = map[string]*policy{}
	}
	a.rolePolicies[arn][name] = p
	return nil
}

// RemoveRole deletes a role.
func (a *AWS) RemoveRole(arn string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.roles, arn)
}

// PutSecret stores a secret under arn (and the name after ":secret:").
func (a *AWS) PutSecret(arn, value string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.secrets[arn] = value
	if _, name, ok := strings.Cut(arn, ":secret:"); ok {
		a.secrets[name] = value
	}
}

// Calls returns the calls so far.
func (a *AWS) Calls() []Call {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Call(nil), a.calls...)
}

// Issued returns the credentials handed out so far.
func (a *AWS) Issued() []Issued {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Issued(nil), a.issued...)
}

func (a *AWS) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

var credRE = regexp.MustCompile(`Credential=([A-Z0-9]+)/`)

// caller is the access key id of a SigV4-signed request, or "".
func caller(r *http.Request) string {
	m := credRE.FindStringSubmatch(r.Header.Get("Authorization"))
	if m == nil {
		return ""
	}
	return m[1]
}

func (a *AWS) record(c Call) {
	a.mu.Lock()
	a.calls = append(a.calls, c)
	a.mu.Unlock()
}

func random(n int) string {
	b := make([]byte, n)
	rand.Read(b) //nolint:errcheck // crypto/rand never fails
	return strings.ToUpper(hex.EncodeToString(b))
}

const stsNS = "https://sts.amazonaws.com/doc/2011-06-15/"

type stsError struct {
	XMLName xml.Name `xml:"ErrorResponse"`
	NS      string   `xml:"xmlns,attr"`
	Error   struct {
		Type    string
		Code    string
		Message string
	}
	RequestID string `xml:"RequestId"`
}

func (a *AWS) serveSTS(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	form, _ := url.ParseQuery(string(body))
	c := Call{Service: "sts", Action: form.Get("Action"), AccessKeyID: caller(r), Params: form}
	fail := func(status int, code, msg string) {
		c.Status = status
		a.record(c)
		e := stsError{NS: stsNS, RequestID: random(8)}
		e.Error.Type, e.Error.Code, e.Error.Message = "Sender", code, msg
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(status)
		xml.NewEncoder(w).Encode(e) //nolint:errcheck // test server
	}
	if r.Method != http.MethodPost || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		fail(400, "InvalidAction", "want a form-encoded POST")
		return
	}
	if c.AccessKeyID == "" {
		fail(403, "MissingAuthenticationToken", "Request is missing Authentication Token")
		return
	}
	if form.Get("Version") != "2011-06-15" {
		fail(400, "InvalidParameterValue", "Version")
		return
	}
	var result any
	switch c.Action {
	case "GetCallerIdentity":
		result = struct {
			XMLName xml.Name `xml:"GetCallerIdentityResult"`
			Arn     string
			UserId  string
			Account string
		}{Arn: "arn:aws:sts::123456789012:assumed-role/agent/" + c.AccessKeyID, UserId: c.AccessKeyID, Account: "123456789012"}
	case "AssumeRole":
		arn, name := form.Get("RoleArn"), form.Get("RoleSessionName")
		secs, _ := strconv.Atoi(cmpOr(form.Get("DurationSeconds"), "3600"))
		if secs < 900 || secs > 43200 {
			fail(400, "ValidationError", fmt.Sprintf("1 validation error detected: Value '%d' at 'durationSeconds' failed to satisfy constraint: Member must have value greater than or equal to 900", secs))
			return
		}
		if len(name) < 2 || len(name) > 64 {
			fail(400, "ValidationError", "roleSessionName")
			return
		}
		doc := form.Get("Policy")
		var pol *policy
		if doc != "" {
			if len(doc) > 2048 {
				fail(400, "PackedPolicyTooLarge", fmt.Sprintf("the session policy has %d characters, more than 2048", len(doc)))
				return
			}
			var err error
			if pol, err = parsePolicy(doc); err != nil {
				fail(400, "MalformedPolicyDocument", err.Error())
				return
			}
		}
		tags, terr := sessionTags(form)
		if terr != "" {
			fail(400, "ValidationError", terr)
			return
		}
		a.mu.Lock()
		ok := a.roles[arn][c.AccessKeyID]
		a.mu.Unlock()
		if !ok {
			fail(403, "AccessDenied", fmt.Sprintf("User: %s is not authorized to perform: sts:AssumeRole on resource: %s", c.AccessKeyID, arn))
			return
		}
		is := Issued{RoleARN: arn, SessionName: name, AccessKeyID: "ASIA" + random(8), SecretAccessKey: random(20), SessionToken: "FQoG" + random(48),
			Expiration: a.now().Add(time.Duration(secs) * time.Second).UTC().Truncate(time.Second), Duration: time.Duration(secs) * time.Second,
			IssuedAt: a.now().UTC(), Policy: doc, Tags: tags, policy: pol}
		a.mu.Lock()
		a.issued = append(a.issued, is)
		a.mu.Unlock()
		type creds struct {
			AccessKeyId     string
			SecretAccessKey string
			SessionToken    string
			Expiration      string
		}
		result = struct {
			XMLName         xml.Name `xml:"AssumeRoleResult"`
			Credentials     creds
			AssumedRoleUser struct{ Arn, AssumedRoleId string }
		}{Credentials: creds{is.AccessKeyID, is.SecretAccessKey, is.SessionToken, is.Expiration.Format(time.RFC3339)},
			AssumedRoleUser: struct{ Arn, AssumedRoleId string }{Arn: arn + "/" + name, AssumedRoleId: "AROA" + random(8) + ":" + name}}
	default:
		fail(400, "InvalidAction", "Could not find operation "+c.Action)
		return
	}
	c.Status = 200
	a.record(c)
	w.Header().Set("Content-Type", "text/xml")
	fmt.Fprintf(w, `<%sResponse xmlns="%s">`, c.Action, stsNS)
	xml.NewEncoder(w).Encode(result) //nolint:errcheck // test server
	fmt.Fprintf(w, `<ResponseMetadata><RequestId>%s</RequestId></ResponseMetadata></%sResponse>`, random(8), c.Action)
}

// sessionTags reads AssumeRole's Tags.member.N.Key and .Value and
// checks them as STS does: at most 50, keys of 1 to 128 characters and
// values of at most 256, of letters, digits, spaces and _ . : / = + - @,
// no key twice (case-insensitively). It returns the tags, or why STS
// would refuse them.
func sessionTags(form url.Values) (map[string]string, string) {
	var tags map[string]string
	seen := map[string]bool{}
	for i := 1; ; i++ {
		k, ok := form["Tags.member."+strconv.Itoa(i)+".Key"]
		if !ok {
			break
		}
		if i > 50 {
			return nil, "1 validation error detected: Value at 'tags' failed to satisfy constraint: Member must have length less than or equal to 50"
		}
		key, v := k[0], form.Get("Tags.member."+strconv.Itoa(i)+".Value")
		switch {
		case len(key) < 1 || len(key) > 128 || !tagChars.MatchString(key):
			return nil, fmt.Sprintf("1 validation error detected: Value '%s' at 'tags.%d.member.key' failed to satisfy constraint: Member must have length less than or equal to 128 and satisfy regular expression pattern: [\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]+", key, i)
		case len(v) > 256 || !tagChars.MatchString(v):
			return nil, fmt.Sprintf("1 validation error detected: Value '%s' at 'tags.%d.member.value' failed to satisfy constraint: Member must have length less than or equal to 256", v, i)
		case seen[strings.ToLower(key)]:
			return nil, "Duplicate tag keys found. Please note that Tag keys are case insensitive."
		}
		seen[strings.ToLower(key)] = true
		if tags == nil {
			tags = map[string]string{}
		}
		tags[key] = v
	}
	return tags, ""
}

var tagChars = regexp.MustCompile(`^[\p{L}\p{Z}\p{N}_.:/=+\-@]*$`)

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (a *AWS) serveSecrets(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	target := r.Header.Get("X-Amz-Target")
	c := Call{Service: "secretsmanager", Action: strings.TrimPrefix(target, "secretsmanager."), AccessKeyID: caller(r), Params: url.Values{"body": {string(body)}}}
	fail := func(status int, typ, msg string) {
		c.Status = status
		a.record(c)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]string{"__type": typ, "message": msg}) //nolint:errcheck // test server
	}
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/x-amz-json-1.1" {
		fail(400, "SerializationException", "want a JSON 1.1 POST")
		return
	}
	if c.AccessKeyID == "" {
		fail(400, "MissingAuthenticationTokenException", "Missing Authentication Token")
		return
	}
	switch c.Action {
	case "GetSecretValue":
		var in struct{ SecretId string }
		if err := json.Unmarshal(body, &in); err != nil || in.SecretId == "" {
			fail(400, "ValidationException", "SecretId is required")
			return
		}
		if status, typ, msg := a.authorize(r, c.AccessKeyID, "secretsmanager:GetSecretValue", in.SecretId); status != 0 {
			fail(status, typ, msg)
			return
		}
		a.mu.Lock()
		v, ok := a.secrets[in.SecretId]
		a.mu.Unlock()
		if !ok {
			fail(400, "ResourceNotFoundException", "Secrets Manager can't find the specified secret.")
			return
		}
		c.Status = 200
		a.record(c)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		json.NewEncoder(w).Encode(map[string]any{ //nolint:errcheck // test server
			"ARN": in.SecretId, "Name": in.SecretId, "SecretString": v, "VersionId": random(8),
			"VersionStages": []string{"AWSCURRENT"}, "CreatedDate": float64(a.now().Unix())})
	default:
		fail(400, "UnknownOperationException", "unknown operation "+target)
	}
}

// authorize decides a call signed by access key id key on resource: the
// agent's own keys (any key AssumeRole did not issue) may do anything; an
// issued key's call needs its session token, must come before the
// credentials expire, and must pass its session policy and its role's
// inline policies at the fake's clock. It returns the error's status,
// type and message, or status 0 when the call is allowed.
func (a *AWS) authorize(r *http.Request, key, action, resource string) (status int, typ, msg string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var is *Issued
	for i := range a.issued {
		if a.issued[i].AccessKeyID == key {
			is = &a.issued[i]
		}
	}
	if is == nil {
		return 0, "", ""
	}
	if r.Header.Get("X-Amz-Security-Token") != is.SessionToken {
		return 400, "UnrecognizedClientException", "The security token included in the request is invalid."
	}
	now := a.now()
	if !now.Before(is.Expiration) {
		return 400, "ExpiredTokenException", "The security token included in the request is expired"
	}
	req := request{Action: action, Resource: resource, Keys: map[string]time.Time{
		"aws:currenttime": now, "aws:epochtime": now, "aws:tokenissuetime": is.IssuedAt}}
	who := is.RoleARN + "/" + is.SessionName
	for _, name := range slices.Sorted(maps.Keys(a.rolePolicies[is.RoleARN])) {
		if eff, sid := a.rolePolicies[is.RoleARN][name].decide(req); eff == "Deny" {
			return 400, "AccessDeniedException", fmt.Sprintf("User: %s is not authorized to perform: %s on resource: %s with an explicit deny in an identity-based policy (%s, statement %s)", who, action, resource, name, sid)
		}
	}
	if is.policy != nil {
		switch eff, sid := is.policy.decide(req); eff {
		case "Deny":
			return 400, "AccessDeniedException", fmt.Sprintf("User: %s is not authorized to perform: %s on resource: %s with an explicit deny in a session policy (statement %s)", who, action, resource, sid)
		case "":
			return 400, "AccessDeniedException", fmt.Sprintf("User: %s is not authorized to perform: %s on resource: %s because no session policy allows the %s action", who, action, resource, action)
		}
	}
	return 0, "", ""
}
