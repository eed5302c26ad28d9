package registry

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"
)

// Authorizer decides a token request: user and password are the request's
// basic credentials, scopes what it asks for (already parsed). It returns
// the token's subject and the scopes to grant, or an error; an error
// wrapping ErrDenied is answered 401 with its text, any other 500 with a
// generic text.
type Authorizer interface {
	Authorize(ctx context.Context, user, password string, scopes []Scope) (subject string, grant []Scope, ttl time.Duration, err error)
}

// ErrDenied marks a refused token request.
var ErrDenied = errors.New("denied")

// MaxScopes bounds the scopes of one token request.
const MaxScopes = 64

// Handler serves the token endpoint (GET /v2/token, the Docker token
// specification): basic credentials, service and scope parameters in, a
// signed token out.
func Handler(s *Signer, a Authorizer, now func() time.Time) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			tokenError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "use GET")
			return
		}
		q := r.URL.Query()
		if svc := q.Get("service"); svc != s.Service {
			tokenError(w, http.StatusBadRequest, "INVALID_REQUEST", "service "+quote(svc)+" is not this registry's ("+quote(s.Service)+")")
			return
		}
		var scopes []Scope
		for _, v := range q["scope"] {
			// The specification lets one parameter hold several scopes,
			// separated by spaces.
			for _, f := range strings.Fields(v) {
				if len(scopes) == MaxScopes {
					tokenError(w, http.StatusBadRequest, "INVALID_REQUEST", "more than 64 scopes")
					return
				}
				sc, err := ParseScope(f)
				if err != nil {
					tokenError(w, http.StatusBadRequest, "INVALID_REQUEST", err.Error())
					return
				}
				scopes = append(scopes, sc)
			}
		}
		user, pass, ok := r.BasicAuth()
		if !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="byoc registry tokens"`)
			tokenError(w, http.StatusUnauthorized, "UNAUTHORIZED", "basic credentials required (an agent presents its grant)")
			return
		}
		subject, grant, ttl, err := a.Authorize(r.Context(), user, pass, scopes)
		if errors.Is(err, ErrDenied) {
			tokenError(w, http.StatusUnauthorized, "DENIED", err.Error())
			return
		}
		if err != nil {
			tokenError(w, http.StatusInternalServerError, "INTERNAL", "internal error")
			return
		}
		t, err := s.Mint(subject, grant, now(), ttl)
		if err != nil {
			tokenError(w, http.StatusInternalServerError, "INTERNAL", "internal error")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(TokenResponse{Token: t.Token, AccessToken: t.Token,
			ExpiresIn: int(ttl / time.Second), IssuedAt: t.IssuedAt.UTC().Format(time.RFC3339)})
	})
}

// TokenResponse is the token endpoint's answer.
type TokenResponse struct {
	Token       string `json:"token"`
	AccessToken string `json:"access_token"`
	ExpiresIn   int    `json:"expires_in"`
	IssuedAt    string `json:"issued_at"`
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

func tokenError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": code, "message": msg}}})
}
