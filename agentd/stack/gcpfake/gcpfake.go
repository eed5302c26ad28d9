// Package gcpfake is a local fake of the three Google Cloud APIs a
// Google Cloud install stack's agent calls, for tests: the Compute
// Engine metadata server's token endpoint (GET
// /computeMetadata/v1/instance/service-accounts/default/token with
// Metadata-Flavor: Google, reached through GCE_METADATA_HOST as the
// real metadata client does), the IAM Credentials API's
// generateAccessToken (POST
// /v1/projects/-/serviceAccounts/EMAIL:generateAccessToken) and Secret
// Manager's AccessSecretVersion (GET
// /v1/projects/P/secrets/S/versions/V:access). The metadata server is
// plain HTTP, as on a VM; the two APIs are one httptest TLS server whose
// Client() trusts its certificate. Both bind loopback.
//
// StartArtifactRegistry adds Artifact Registry's token realm in front of
// a real docker-registry (registry.go).
//
// It models what the agent relies on, not Google Cloud: the VM's service
// account (its metadata token is the only one the VM gets), which
// service accounts exist, which principals may impersonate which
// (roles/iam.serviceAccountTokenCreator on the target; others get 403
// PERMISSION_DENIED), which may read secrets
// (roles/secretmanager.secretAccessor), tokens that are the fake's own
// and not expired (else 401), lifetimes of at most an hour (else 400),
// and secrets by project and id. No binary links it.
package gcpfake

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// MaxLifetime is the longest token generateAccessToken issues (without
// the organisation policy that extends it).
const MaxLifetime = time.Hour

// GCP is the fake.
type GCP struct {
	// Metadata is the metadata server; API serves IAM Credentials and
	// Secret Manager.
	Metadata, API *httptest.Server
	// VMAccount is the VM's own service account (the agent's).
	VMAccount string

	mu        sync.Mutex
	accounts  map[string]bool
	creators  map[[2]string]bool // caller, target
	accessors map[string]bool
	secrets   map[string]string // projects/P/secrets/S
	issued    []Token
	byToken   map[string]Token
	// registryRoles are each account's actions on the Artifact Registry
	// (registry.go).
	registryRoles map[string][]string
}

// Token is a token the fake issued.
type Token struct {
	// Account is whose token it is; Lifetime what was asked for (zero
	// for the metadata server's).
	Account, Token string
	Lifetime       time.Duration
	Scopes         []string
	Expires        time.Time
}

// New starts the fake with vmAccount as the VM's service account; its
// servers close with the test.
func New(tb testing.TB, vmAccount string) *GCP {
	tb.Helper()
	g := &GCP{VMAccount: vmAccount, accounts: map[string]bool{vmAccount: true}, creators: map[[2]string]bool{},
		accessors: map[string]bool{}, secrets: map[string]string{}, byToken: map[string]Token{}, registryRoles: map[string][]string{}}
	md := http.NewServeMux()
	md.HandleFunc("GET /computeMetadata/v1/instance/service-accounts/default/token", g.serveMetadataToken)
	g.Metadata = httptest.NewServer(md)
	api := http.NewServeMux()
	api.HandleFunc("POST /v1/projects/{project}/serviceAccounts/{rest}", g.serveGenerate)
	api.HandleFunc("GET /v1/projects/{project}/secrets/{secret}/versions/{rest}", g.serveAccess)
	g.API = httptest.NewTLSServer(api)
	tb.Cleanup(g.Metadata.Close)
	tb.Cleanup(g.API.Close)
	return g
}

// Setenv points the metadata client at the fake (GCE_METADATA_HOST) for
// the test.
func (g *GCP) Setenv(t *testing.T) {
	t.Setenv("GCE_METADATA_HOST", strings.TrimPrefix(g.Metadata.URL, "http://"))
}

// Client trusts the API server's certificate.
func (g *GCP) Client() *http.Client { return g.API.Client() }

// URL is the API server's base URL (both APIs' endpoint).
func (g *GCP) URL() string { return g.API.URL + "/" }

// CreateServiceAccount makes service accounts exist.
func (g *GCP) CreateServiceAccount(emails ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range emails {
		g.accounts[e] = true
	}
}

// DeleteServiceAccount removes one (a mode turned off).
func (g *GCP) DeleteServiceAccount(email string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.accounts, email)
}

// GrantTokenCreator lets caller impersonate target.
func (g *GCP) GrantTokenCreator(caller, target string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.creators[[2]string{caller, target}] = true
}

// GrantSecretAccessor lets account read every secret.
func (g *GCP) GrantSecretAccessor(account string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.accessors[account] = true
}

// PutSecret adds a version of project's secret id.
func (g *GCP) PutSecret(project, id, value string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.secrets["projects/"+project+"/secrets/"+id] = value
}

// Issued lists the tokens issued, in order.
func (g *GCP) Issued() []Token {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Token(nil), g.issued...)
}

func (g *GCP) issue(account string, lifetime time.Duration, scopes []string) Token {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	d := lifetime
	if d == 0 {
		d = MaxLifetime
	}
	t := Token{Account: account, Token: "ya29.fake-" + hex.EncodeToString(b), Lifetime: lifetime, Scopes: scopes,
		Expires: time.Now().Add(d).Truncate(time.Second)}
	g.issued = append(g.issued, t)
	g.byToken[t.Token] = t
	return t
}

func (g *GCP) serveMetadataToken(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Metadata-Flavor") != "Google" {
		http.Error(w, "missing Metadata-Flavor: Google", http.StatusForbidden)
		return
	}
	g.mu.Lock()
	t := g.issue(g.VMAccount, 0, strings.Split(r.URL.Query().Get("scopes"), ","))
	g.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Metadata-Flavor", "Google")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": t.Token, "expires_in": int(time.Until(t.Expires).Seconds()), "token_type": "Bearer"})
}

// caller returns the account of the request's bearer token, or writes
// 401.
func (g *GCP) caller(w http.ResponseWriter, r *http.Request) (string, bool) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	t, known := g.byToken[tok]
	if !ok || !known || time.Now().After(t.Expires) {
		apiError(w, http.StatusUnauthorized, "UNAUTHENTICATED", "Request had invalid authentication credentials.")
		return "", false
	}
	return t.Account, true
}

func (g *GCP) serveGenerate(w http.ResponseWriter, r *http.Request) {
	target, ok := strings.CutSuffix(r.PathValue("rest"), ":generateAccessToken")
	if !ok || r.PathValue("project") != "-" {
		apiError(w, http.StatusNotFound, "NOT_FOUND", "unknown method "+r.URL.Path)
		return
	}
	var req struct {
		Lifetime string   `json:"lifetime"`
		Scope    []string `json:"scope"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Scope) == 0 {
		apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "a JSON body with scope is required")
		return
	}
	lifetime := MaxLifetime
	if req.Lifetime != "" {
		secs, err := strconv.ParseFloat(strings.TrimSuffix(req.Lifetime, "s"), 64)
		if err != nil || !strings.HasSuffix(req.Lifetime, "s") || secs <= 0 {
			apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "lifetime: "+req.Lifetime+" is not a duration")
			return
		}
		lifetime = time.Duration(secs * float64(time.Second))
	}
	if lifetime > MaxLifetime {
		apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf("The lifetime requested %s exceeds the maximum of 3600s", req.Lifetime))
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	caller, ok := g.caller(w, r)
	if !ok {
		return
	}
	if !g.accounts[target] {
		apiError(w, http.StatusNotFound, "NOT_FOUND", "Service account projects/-/serviceAccounts/"+target+" does not exist.")
		return
	}
	if !g.creators[[2]string{caller, target}] {
		apiError(w, http.StatusForbidden, "PERMISSION_DENIED", "Permission 'iam.serviceAccounts.getAccessToken' denied on resource (or it may not exist).")
		return
	}
	t := g.issue(target, lifetime, req.Scope)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"accessToken": t.Token, "expireTime": t.Expires.UTC().Format(time.RFC3339)})
}

func (g *GCP) serveAccess(w http.ResponseWriter, r *http.Request) {
	version, ok := strings.CutSuffix(r.PathValue("rest"), ":access")
	if !ok {
		apiError(w, http.StatusNotFound, "NOT_FOUND", "unknown method "+r.URL.Path)
		return
	}
	name := "projects/" + r.PathValue("project") + "/secrets/" + r.PathValue("secret")
	g.mu.Lock()
	defer g.mu.Unlock()
	caller, ok := g.caller(w, r)
	if !ok {
		return
	}
	if !g.accessors[caller] {
		apiError(w, http.StatusForbidden, "PERMISSION_DENIED", "Permission 'secretmanager.versions.access' denied for resource '"+name+"/versions/"+version+"' (or it may not exist).")
		return
	}
	v, ok := g.secrets[name]
	if !ok || version != "latest" && version != "1" {
		apiError(w, http.StatusNotFound, "NOT_FOUND", "Secret ["+name+"] not found or has no versions.")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"name": name + "/versions/1", "payload": map[string]string{"data": base64.StdEncoding.EncodeToString([]byte(v))}})
}

func apiError(w http.ResponseWriter, code int, status, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": msg, "status": status}})
}
