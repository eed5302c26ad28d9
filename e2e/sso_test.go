package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/text/language"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// idp is a real OpenID provider for the test: zitadel/oidc's op package
// with its example server's login and device pages and in-memory
// storage, plus a groups claim per user and the byoc CLI's client (a
// public native client: PKCE, device code and refresh tokens, with an ID
// token lifetime the test sets).
type idp struct {
	issuer string
	life   atomic.Int64 // ID token lifetime, ns
}

type idpUsers map[string]*storage.User

func (u idpUsers) GetUserByID(id string) *storage.User {
	if x, ok := u[id]; ok {
		return x
	}
	return u.GetUserByUsername(id) // the device flow's subject is the username
}

func (u idpUsers) GetUserByUsername(name string) *storage.User {
	for _, x := range u {
		if x.Username == name {
			return x
		}
	}
	return nil
}

func (u idpUsers) ExampleClientID() string { return "service" }

type idpStorage struct {
	*storage.Storage
	users  idpUsers
	groups map[string][]string // by user id
	idp    *idp
}

// SetUserinfoFromRequest fills the ID token's claims: the example's,
// and the user's groups.
func (s *idpStorage) SetUserinfoFromRequest(ctx context.Context, ui *oidc.UserInfo, req op.IDTokenRequest, scopes []string) error {
	if err := s.Storage.SetUserinfoFromRequest(ctx, ui, req, scopes); err != nil {
		return err
	}
	if u := s.users.GetUserByID(req.GetSubject()); u != nil {
		ui.AppendClaims("groups", s.groups[u.ID])
	}
	return nil
}

// TokenRequestByRefreshToken: the example storage does not record the
// client of a refresh token from the device flow (its getInfoFromRequest
// knows the code and refresh flows only); the test's one client is it.
func (s *idpStorage) TokenRequestByRefreshToken(ctx context.Context, token string) (op.RefreshTokenRequest, error) {
	r, err := s.Storage.TokenRequestByRefreshToken(ctx, token)
	if rr, ok := r.(*storage.RefreshTokenRequest); ok && rr.ApplicationID == "" {
		rr.ApplicationID = "byoc-cli"
	}
	return r, err
}

func (s *idpStorage) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	if id == "byoc-cli" {
		return cliClient{Client: storage.NativeClient("byoc-cli", "http://127.0.0.1/callback"), idp: s.idp}, nil
	}
	return s.Storage.GetClientByClientID(ctx, id)
}

type cliClient struct {
	*storage.Client
	idp *idp
}

func (c cliClient) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeRefreshToken, oidc.GrantTypeDeviceCode}
}
func (c cliClient) IDTokenLifetime() time.Duration       { return time.Duration(c.idp.life.Load()) }
func (c cliClient) IDTokenUserinfoClaimsAssertion() bool { return true }

func startIDP(t *testing.T) *idp {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &idp{issuer: "http://" + ln.Addr().String()}
	p.life.Store(int64(30 * time.Second))
	users := idpUsers{
		"u-ann": {ID: "u-ann", Username: "ann", Password: "pw-ann", Email: "ann@vendor.example", EmailVerified: true, PreferredLanguage: language.English},
		"u-bob": {ID: "u-bob", Username: "bob", Password: "pw-bob", Email: "bob@vendor.example", EmailVerified: true, PreferredLanguage: language.English},
	}
	st := &idpStorage{Storage: storage.NewStorageWithClients(users, map[string]*storage.Client{"byoc-cli": storage.NativeClient("byoc-cli", "http://127.0.0.1/callback")}), users: users, idp: p,
		groups: map[string][]string{"u-ann": {"support-acme", "unmapped"}, "u-bob": {"ops"}}}
	srv := &http.Server{Handler: exampleop.SetupServer(p.issuer, st, nil, false), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
	return p
}

// browser is a person's browser: cookies, redirects followed.
func browser(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 20 * time.Second}
}

// startLogin starts byoc login and returns the process and the first
// stderr line that contains want.
func startLogin(t *testing.T, cli *cluster.CLI, want string, args ...string) (*exec.Cmd, *strings.Builder, string) {
	t.Helper()
	cmd := cli.Cmd(append([]string{"login"}, args...)...)
	var out strings.Builder
	cmd.Stdout = &out
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(errPipe)
	for sc.Scan() {
		if strings.Contains(sc.Text(), want) {
			go io.Copy(io.Discard, errPipe) //nolint:errcheck
			return cmd, &out, sc.Text()
		}
	}
	cmd.Wait() //nolint:errcheck
	t.Fatalf("byoc login printed no %q (stdout %q)", want, out.String())
	return nil, nil, ""
}

func sessionOf(t *testing.T, config, context string) (idToken string, mode os.FileMode) {
	t.Helper()
	fi, err := os.Stat(config)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Contexts []struct {
			Name    string `json:"name"`
			Session *struct {
				IDToken string `json:"idToken"`
			} `json:"session"`
		} `json:"contexts"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	for _, cc := range c.Contexts {
		if cc.Name == context && cc.Session != nil {
			return cc.Session.IDToken, fi.Mode().Perm()
		}
	}
	t.Fatalf("no session for context %s in %s", context, b)
	return "", 0
}

// byoc login against a real OpenID provider: the browser flow (auth
// code with PKCE on a loopback port) and the device flow; imsd verifies
// the ID token with go-oidc and maps groups to role grants by its SSO
// config; the CLI refreshes a session about to expire; imsd refuses an
// expired or forged ID token.
func TestLoginWithSingleSignOn(t *testing.T) {
	p := startIDP(t)
	ssoConfig := filepath.Join(t.TempDir(), "sso.toml")
	if err := os.WriteFile(ssoConfig, []byte(`issuer = "`+p.issuer+`"
client_id = "byoc-cli"
scopes = ["email", "profile"]

[[group]]
name = "support-acme"
role = "support"
selector = "customer=acme"

[[group]]
name = "ops"
role = "operator"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := fast
	opts.SSOConfigFile = ssoConfig
	ims := cluster.StartIMS(t, opts)
	ctx := context.Background()
	var files []*imsv1.AppFile
	for path, c := range rolesApp {
		files = append(files, &imsv1.AppFile{Path: path, Content: []byte(c)})
	}
	if _, err := ims.Admin().PushAppRevision(ctx, connect.NewRequest(&imsv1.PushAppRevisionRequest{Files: files})); err != nil {
		t.Fatal(err)
	}
	cli := &cluster.CLI{Config: filepath.Join(t.TempDir(), "byoc.json")}
	cli = cluster.NewCLIWith(t, cli.Config, ims.URL(), ims.AdminToken) // context "test" (admin); login adds "sso"

	// The browser flow, as ann (support-acme).
	cmd, out, line := startLogin(t, cli, "http", "--server", ims.URL(), "--context", "sso")
	authURL := strings.TrimSpace(line[strings.Index(line, "http"):])
	b := browser(t)
	res, err := b.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	id := res.Request.URL.Query().Get("authRequestID")
	if id == "" {
		t.Fatalf("the provider did not show its login page: %s", res.Request.URL)
	}
	res, err = b.PostForm(p.issuer+"/login/username", url.Values{"id": {id}, "username": {"ann"}, "password": {"pw-ann"}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), "Signed in to byoc") {
		t.Fatalf("the loopback callback answered %s: %s", res.Status, body)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("byoc login: %v\n%s", err, out)
	}
	for _, want := range []string{"signed in to " + ims.URL() + " as ann@vendor.example (context sso)", "support on installs with labels customer=acme (group support-acme)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("byoc login printed no %q:\n%s", want, out)
		}
	}
	tok1, mode := sessionOf(t, cli.Config, "sso")
	if mode != 0o600 {
		t.Errorf("the config file holding the session has mode %o, want 600", mode)
	}
	if got := cli.Run(0, "auth", "whoami"); !strings.Contains(got, "Signed in as:  ann@vendor.example") || !strings.Contains(got, "group support-acme") {
		t.Errorf("whoami:\n%s", got)
	}
	// The session's ID token lives 30s, less than byoc's refresh margin:
	// every command refreshes it first.
	tok2, _ := sessionOf(t, cli.Config, "sso")
	if tok2 == tok1 {
		t.Error("byoc did not refresh a session about to expire")
	}
	if got := cli.Run(0, "install", "list"); !strings.Contains(got, "acme") || strings.Contains(got, "globex") {
		t.Errorf("ann's install list:\n%s", got)
	}
	cli.Run(0, "auth", "can-i", "break-glass", "acme")
	if got := cli.Run(1, "install", "provision", "acme"); !strings.Contains(got, "user ann@vendor.example holds role support on installs with labels customer=acme") {
		t.Errorf("provision as support: %s", got)
	}
	cli.Run(0, "breakglass", "request", "acme", "--role", "debugger", "--reason", "ticket 7")
	evs, err := ims.Admin().ListAuditEvents(ctx, connect.NewRequest(&imsv1.ListAuditEventsRequest{Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	var actors []string
	for _, e := range evs.Msg.Events {
		actors = append(actors, e.Actor)
	}
	if !strings.Contains(strings.Join(actors, " "), "user:ann@vendor.example") {
		t.Errorf("acme's audit names no user:ann@vendor.example: %v", actors)
	}

	// The device flow, as bob (ops: operator everywhere), with ID tokens
	// that live 2s.
	p.life.Store(int64(2 * time.Second))
	cmd, out, line = startLogin(t, cli, "device code:", "--device", "--context", "sso")
	code := strings.TrimSpace(strings.TrimPrefix(line, "device code:"))
	b = browser(t)
	res, err = b.PostForm(p.issuer+"/device/login", url.Values{"user_code": {code}, "username": {"bob"}, "password": {"pw-bob"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	res, err = b.PostForm(p.issuer+"/device/confirm", url.Values{"action": {"allowed"}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), "allowed") {
		t.Fatalf("device confirm: %s", body)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("byoc login --device: %v\n%s", err, out)
	}
	if !strings.Contains(out.String(), "as bob@vendor.example") || !strings.Contains(out.String(), "operator on every install (group ops)") {
		t.Errorf("byoc login --device:\n%s", out)
	}
	bobTok, _ := sessionOf(t, cli.Config, "sso")

	// imsd refuses the ID token once it expired (polled, with a deadline).
	bob := ims.Client(bobTok)
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := bob.WhoAmI(ctx, connect.NewRequest(&imsv1.WhoAmIRequest{}))
		if err != nil {
			if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "expired") {
				t.Fatalf("expired ID token: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("imsd still accepts an ID token 15s after it was issued for 2s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The CLI refreshes it and goes on.
	if got := cli.Run(0, "auth", "whoami"); !strings.Contains(got, "bob@vendor.example") {
		t.Errorf("whoami after expiry:\n%s", got)
	}
	// A forged token (another signature) is refused.
	parts := strings.Split(bobTok, ".")
	forged := parts[0] + "." + parts[1] + "." + strings.Repeat("A", len(parts[2]))
	_, err = ims.Client(forged).WhoAmI(ctx, connect.NewRequest(&imsv1.WhoAmIRequest{}))
	wantCode(t, err, connect.CodeUnauthenticated, "not valid")
}
