package ocitest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TokenProxy fronts a registry (a real docker-registry without auth)
// with the Docker token flow, as a cloud's registry does: a request
// without a bearer token, or with one that lacks the action it needs
// (pull for GET and HEAD, push otherwise), gets 401 and a Bearer
// challenge naming the realm; the realm issues tokens for the actions
// Allowed grants the principal Login names. Plain HTTP on loopback.
type TokenProxy struct {
	Server *httptest.Server
	// Host is 127.0.0.1:PORT (the registry's name and the service).
	Host string
	// Mux serves the realm and the registry; a fake adds its own
	// endpoints (an exchange) to it.
	Mux *http.ServeMux

	mu     sync.Mutex
	tokens map[string]map[string][]string // token → repository → actions
	logins []string
}

// Logins are the principals the realm issued tokens to, in order.
func (p *TokenProxy) Logins() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.logins...)
}

// TokenProxyOptions configure StartTokenProxy.
type TokenProxyOptions struct {
	// Backend is the registry's host:port.
	Backend string
	// RealmPath is the token endpoint's path (/oauth2/token on ACR,
	// /v2/token on Artifact Registry).
	RealmPath string
	// Login authenticates a token request (Basic auth, or a form's
	// refresh_token): the principal, or an error the realm answers 401
	// with.
	Login func(r *http.Request) (principal string, err error)
	// Allowed is what principal may do in repository: pull, push.
	Allowed func(principal, repository string) []string
}

var repoPathRE = regexp.MustCompile(`^/v2/(.+?)/(blobs|manifests|tags|referrers)(/|$)`)

// StartTokenProxy starts the proxy; it closes with the test.
func StartTokenProxy(tb testing.TB, o TokenProxyOptions) *TokenProxy {
	tb.Helper()
	p := &TokenProxy{Mux: http.NewServeMux(), tokens: map[string]map[string][]string{}}
	backend := &url.URL{Scheme: "http", Host: o.Backend}
	rp := httputil.NewSingleHostReverseProxy(backend)
	p.Mux.HandleFunc(o.RealmPath, func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		who, err := o.Login(r)
		if err != nil {
			writeErr(w, http.StatusUnauthorized, "UNAUTHORIZED", err.Error())
			return
		}
		if svc := r.Form.Get("service"); svc != p.Host {
			writeErr(w, http.StatusBadRequest, "UNSUPPORTED", fmt.Sprintf("service %q is not %s", svc, p.Host))
			return
		}
		granted := map[string][]string{}
		for _, scopes := range r.Form["scope"] {
			for scope := range strings.FieldsSeq(scopes) {
				parts := strings.Split(scope, ":")
				if len(parts) != 3 || parts[0] != "repository" {
					continue
				}
				allowed := o.Allowed(who, parts[1])
				for a := range strings.SplitSeq(parts[2], ",") {
					if slices.Contains(allowed, a) || (a == "*" && len(allowed) > 0) {
						granted[parts[1]] = append(granted[parts[1]], a)
					}
				}
			}
		}
		var b [16]byte
		_, _ = rand.Read(b[:])
		tok := "fake-registry-" + hex.EncodeToString(b[:])
		p.mu.Lock()
		p.tokens[tok] = granted
		p.logins = append(p.logins, who)
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"token": tok, "access_token": tok, "expires_in": 300})
	})
	p.Mux.HandleFunc("/v2/", func(w http.ResponseWriter, r *http.Request) {
		need, repo := "", ""
		if m := repoPathRE.FindStringSubmatch(r.URL.Path); m != nil {
			repo, need = m[1], "push"
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				need = "pull"
			}
		}
		tok, isBearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		p.mu.Lock()
		granted, known := p.tokens[tok]
		p.mu.Unlock()
		ok := isBearer && known && (need == "" || slices.Contains(granted[repo], need) || slices.Contains(granted[repo], "*"))
		if !ok {
			ch := fmt.Sprintf(`Bearer realm="http://%s%s",service="%s"`, p.Host, o.RealmPath, p.Host)
			if repo != "" {
				ch += fmt.Sprintf(`,scope="repository:%s:pull,push"`, repo)
				if known {
					ch += `,error="insufficient_scope"`
				}
			}
			w.Header().Set("WWW-Authenticate", ch)
			writeErr(w, http.StatusUnauthorized, "UNAUTHORIZED", "authentication required")
			return
		}
		r.Header.Del("Authorization")
		rp.ServeHTTP(w, r)
	})
	p.Server = httptest.NewServer(p.Mux)
	p.Host = strings.TrimPrefix(p.Server.URL, "http://")
	tb.Cleanup(p.Server.Close)
	// An agent a test starts lets its plugins reach it (Hosts).
	hostsMu.Lock()
	hosts = append(hosts, p.Host)
	hostsMu.Unlock()
	return p
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []any{map[string]any{"code": code, "message": msg}}})
}
