// Package azurefake is a local fake of the two Azure APIs an Azure
// install stack's agent calls, for tests: a managed identity token
// endpoint (the App Service protocol, which azidentity's
// ManagedIdentityCredential uses when IDENTITY_ENDPOINT and
// IDENTITY_HEADER are set: GET with the X-IDENTITY-HEADER secret,
// resource and client_id query parameters, a JSON token answer) and Key
// Vault's secrets API (GET /secrets/NAME/[VERSION], behind a bearer
// challenge: a request without a token gets 401 and a WWW-Authenticate
// naming the tenant and https://vault.azure.net). Both are served by one
// httptest TLS server on loopback, since azcore refuses to send a bearer
// token over plain HTTP; the real azidentity and azsecrets clients reach
// it with Client()'s transport, which trusts its certificate.
//
// StartRegistry adds an Azure Container Registry's token exchange in
// front of a real docker-registry (registry.go).
//
// It models what the agent relies on, not Azure: which user-assigned
// identities are attached to the VM (a token for another is refused, as
// IMDS refuses an identity it does not have), which identities Key Vault
// lets read secrets (the Key Vault Secrets User role; others get 403
// ForbiddenByRbac), tokens that are the fake's own, for the right
// resource and not expired (else 401), and secrets by name. No binary
// links it.
package azurefake

import (
	"crypto/rand"
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

// Resources of the tokens the fake issues (the scope without /.default).
const (
	VaultResource      = "https://vault.azure.net"
	ManagementResource = "https://management.azure.com"
)

// TokenPath is the token endpoint's path (IDENTITY_ENDPOINT).
const TokenPath = "/msi/token"

// Azure is the fake.
type Azure struct {
	Server *httptest.Server
	// Tenant is the tenant the Key Vault challenge names.
	Tenant string
	// Header is the IDENTITY_HEADER secret the token endpoint requires.
	Header string
	// Lifetime is how long a token lasts (default 24 hours, as a managed
	// identity's does).
	Lifetime time.Duration

	mu       sync.Mutex
	attached map[string]bool
	readers  map[string]bool
	secrets  map[string]string
	issued   []Token
	byToken  map[string]Token

	// The registry (registry.go): refresh tokens by client id, each
	// identity's actions, whose tokens were exchanged.
	refresh       map[string]string
	registryRoles map[string][]string
	exchanged     []string
}

// Token is a token the endpoint issued.
type Token struct {
	ClientID, Resource, Token string
	ExpiresOn                 time.Time
}

// New starts the fake; its server closes with the test.
func New(tb testing.TB) *Azure {
	tb.Helper()
	a := &Azure{Tenant: NewID(), Header: "hdr-" + NewID(), Lifetime: 24 * time.Hour,
		attached: map[string]bool{}, readers: map[string]bool{}, secrets: map[string]string{}, byToken: map[string]Token{},
		refresh: map[string]string{}, registryRoles: map[string][]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+TokenPath, a.serveToken)
	mux.HandleFunc("GET /secrets/{name}/{version...}", a.serveSecret)
	mux.HandleFunc("GET /secrets/{name}", a.serveSecret)
	a.Server = httptest.NewTLSServer(mux)
	tb.Cleanup(a.Server.Close)
	return a
}

// NewID returns a random GUID (a client id, a tenant). Tests use a new
// one each: MSAL caches managed identity tokens per client id for the
// whole process.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// Env is the environment that points azidentity's managed identity
// credential at the fake: IDENTITY_ENDPOINT and IDENTITY_HEADER.
func (a *Azure) Env() map[string]string {
	return map[string]string{"IDENTITY_ENDPOINT": a.Server.URL + TokenPath, "IDENTITY_HEADER": a.Header}
}

// Setenv sets Env for the test.
func (a *Azure) Setenv(t *testing.T) {
	for k, v := range a.Env() {
		t.Setenv(k, v)
	}
}

// Client is an HTTP client that trusts the fake's certificate.
func (a *Azure) Client() *http.Client { return a.Server.Client() }

// VaultURL is the Key Vault's URL.
func (a *Azure) VaultURL() string { return a.Server.URL + "/" }

// Attach attaches user-assigned identities (client ids) to the VM.
func (a *Azure) Attach(clientIDs ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range clientIDs {
		a.attached[id] = true
	}
}

// Detach detaches an identity: the endpoint refuses its tokens.
func (a *Azure) Detach(clientID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.attached, clientID)
}

// GrantSecretsUser gives an identity Key Vault Secrets User on the vault.
func (a *Azure) GrantSecretsUser(clientID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.readers[clientID] = true
}

// PutSecret sets secret name's value.
func (a *Azure) PutSecret(name, value string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.secrets[name] = value
}

// Issued returns the tokens issued so far.
func (a *Azure) Issued() []Token {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Token(nil), a.issued...)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// serveToken is the App Service managed identity protocol (api-version
// 2019-08-01).
func (a *Azure) serveToken(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	fail := func(status int, msg string) {
		writeJSON(w, status, map[string]any{"statusCode": status, "message": msg})
	}
	switch {
	case r.Header.Get("X-IDENTITY-HEADER") != a.Header:
		fail(http.StatusUnauthorized, "X-IDENTITY-HEADER is missing or wrong")
		return
	case q.Get("api-version") != "2019-08-01":
		fail(http.StatusBadRequest, "unsupported api-version "+q.Get("api-version"))
		return
	case q.Get("resource") == "":
		fail(http.StatusBadRequest, "resource is required")
		return
	}
	id := q.Get("client_id")
	a.mu.Lock()
	defer a.mu.Unlock()
	if id == "" || !a.attached[id] {
		fail(http.StatusBadRequest, fmt.Sprintf("Identity not found: no user-assigned managed identity with client id %q is assigned to this resource", id))
		return
	}
	t := Token{ClientID: id, Resource: strings.TrimSuffix(q.Get("resource"), "/"), Token: "fake-mi-" + NewID(), ExpiresOn: time.Now().Add(a.Lifetime).Truncate(time.Second)}
	a.issued = append(a.issued, t)
	a.byToken[t.Token] = t
	writeJSON(w, http.StatusOK, map[string]any{
		"access_token": t.Token, "expires_on": strconv.FormatInt(t.ExpiresOn.Unix(), 10),
		"resource": t.Resource, "token_type": "Bearer", "client_id": id,
	})
}

// serveSecret is Key Vault's Get Secret.
func (a *Azure) serveSecret(w http.ResponseWriter, r *http.Request) {
	kvErr := func(status int, code, inner, msg string) {
		e := map[string]any{"code": code, "message": msg}
		if inner != "" {
			e["innererror"] = map[string]any{"code": inner}
		}
		writeJSON(w, status, map[string]any{"error": e})
	}
	auth := r.Header.Get("Authorization")
	if auth == "" {
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer authorization="https://login.microsoftonline.com/%s", resource="%s"`, a.Tenant, VaultResource))
		kvErr(http.StatusUnauthorized, "Unauthorized", "", "AKV10000: Request is missing a Bearer or PoP token.")
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.byToken[strings.TrimPrefix(auth, "Bearer ")]
	switch {
	case !ok || !strings.HasPrefix(auth, "Bearer "):
		kvErr(http.StatusUnauthorized, "Unauthorized", "", "AKV10032: Invalid issuer: the token is not one this tenant issued.")
		return
	case t.Resource != VaultResource:
		kvErr(http.StatusUnauthorized, "Unauthorized", "", fmt.Sprintf("AKV10022: Invalid audience. Expected %s, found: %s.", VaultResource, t.Resource))
		return
	case !time.Now().Before(t.ExpiresOn):
		kvErr(http.StatusUnauthorized, "Unauthorized", "", "AKV10022: the token has expired.")
		return
	case !a.readers[t.ClientID]:
		kvErr(http.StatusForbidden, "Forbidden", "ForbiddenByRbac", fmt.Sprintf("Caller is not authorized to perform action on resource. Caller: appid=%s. Action: 'Microsoft.KeyVault/vaults/secrets/getSecret/action'", t.ClientID))
		return
	}
	name := r.PathValue("name")
	v, ok := a.secrets[name]
	if !ok {
		kvErr(http.StatusNotFound, "SecretNotFound", "", fmt.Sprintf("A secret with (name/id) %s was not found in this key vault.", name))
		return
	}
	now := time.Now().Unix()
	writeJSON(w, http.StatusOK, map[string]any{
		"value": v, "id": a.VaultURL() + "secrets/" + name + "/0123456789abcdef0123456789abcdef",
		"attributes": map[string]any{"enabled": true, "created": now, "updated": now, "recoveryLevel": "Recoverable+Purgeable"},
	})
}
