package terraform

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The job's Azure token, as an Azure stack's agent puts it in the
// operation's environment (agentd/stack assumeAzure).
const (
	envAzureToken   = "BYOC_AZURE_ACCESS_TOKEN"
	envAzureExpires = "BYOC_AZURE_TOKEN_EXPIRES"
	envAzureClient  = "ARM_CLIENT_ID"
)

// armResource is what the job's token is for: Azure Resource Manager.
const armResource = "https://management.azure.com/"

// azureTokenEndpoint serves the job's Azure token (and nothing else) on
// loopback inside the job's sandbox, in the two shapes of managed
// identity endpoint Azure's clients speak, since the sandbox blocks the
// instance metadata service and the azurerm provider cannot take a bare
// access token:
//   - App Service (IDENTITY_ENDPOINT, with the IDENTITY_HEADER secret as
//     X-IDENTITY-HEADER), which azidentity's ManagedIdentityCredential
//     uses when those variables are set;
//   - the instance metadata service's (Metadata: true), which the azurerm
//     provider uses with ARM_USE_MSI=true and ARM_MSI_ENDPOINT.
//
// It answers only for Azure Resource Manager and the job's identity:
// another resource or client id is refused with a message saying so.
type azureTokenEndpoint struct {
	token, clientID, secret string
	expires                 time.Time
	srv                     *http.Server
	ln                      net.Listener
}

// startAzureTokenEndpoint starts the endpoint when opEnv carries an
// Azure token and returns the variables that point the job's clients at
// it; without a token it returns nil and no endpoint.
func startAzureTokenEndpoint(opEnv map[string]string) (*azureTokenEndpoint, map[string]string, error) {
	tok := opEnv[envAzureToken]
	if tok == "" {
		return nil, nil, nil
	}
	expires := time.Now().Add(time.Hour)
	if s := opEnv[envAzureExpires]; s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return nil, nil, errors.New(envAzureExpires + ": " + err.Error())
		}
		expires = t
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, errors.New("the job's Azure token endpoint: " + err.Error())
	}
	e := &azureTokenEndpoint{token: tok, clientID: opEnv[envAzureClient], secret: hex.EncodeToString(b), expires: expires, ln: ln}
	e.srv = &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = e.srv.Serve(ln) }()
	base := "http://" + ln.Addr().String()
	env := map[string]string{
		"IDENTITY_ENDPOINT": base + "/msi/token",
		"IDENTITY_HEADER":   e.secret,
		"ARM_USE_MSI":       "true",
		"ARM_MSI_ENDPOINT":  base + "/metadata/identity/oauth2/token",
	}
	return e, env, nil
}

// Close stops the endpoint.
func (e *azureTokenEndpoint) Close() {
	if e != nil {
		_ = e.srv.Close()
	}
}

func (e *azureTokenEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail := func(code int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_request", "error_description": msg})
	}
	if r.Method != http.MethodGet {
		fail(http.StatusMethodNotAllowed, "GET only")
		return
	}
	switch r.URL.Path {
	case "/msi/token":
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("X-IDENTITY-HEADER")), []byte(e.secret)) != 1 {
			fail(http.StatusUnauthorized, "X-IDENTITY-HEADER is not this job's IDENTITY_HEADER")
			return
		}
	case "/metadata/identity/oauth2/token":
		if r.Header.Get("Metadata") != "true" {
			fail(http.StatusBadRequest, "no Metadata: true header")
			return
		}
	default:
		fail(http.StatusNotFound, "not a token endpoint: "+r.URL.Path)
		return
	}
	q := r.URL.Query()
	if res := strings.TrimSuffix(q.Get("resource"), "/"); res != strings.TrimSuffix(armResource, "/") {
		fail(http.StatusBadRequest, "resource "+strconv.Quote(q.Get("resource"))+": this job's token is for Azure Resource Manager ("+armResource+") only")
		return
	}
	for _, k := range []string{"client_id", "mi_res_id", "msi_res_id", "object_id", "principal_id"} {
		if v := q.Get(k); v != "" && (k != "client_id" || !strings.EqualFold(v, e.clientID)) {
			fail(http.StatusBadRequest, k+" "+strconv.Quote(v)+": this job has only its mode's identity (client id "+e.clientID+")")
			return
		}
	}
	exp := strconv.FormatInt(e.expires.Unix(), 10)
	in := strconv.FormatInt(max(0, int64(time.Until(e.expires).Seconds())), 10)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{
		"access_token": e.token, "token_type": "Bearer", "resource": armResource, "client_id": e.clientID,
		"expires_on": exp, "expires_in": in, "ext_expires_in": in,
	})
}
