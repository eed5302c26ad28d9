package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"golang.org/x/oauth2"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// refreshBefore is how long before its ID token expires a session is
// refreshed.
const refreshBefore = time.Minute

// discovery is the part of an OpenID provider's discovery document byoc
// login uses.
type discovery struct {
	Issuer                      string `json:"issuer"`
	AuthorizationEndpoint       string `json:"authorization_endpoint"`
	TokenEndpoint               string `json:"token_endpoint"`
	DeviceAuthorizationEndpoint string `json:"device_authorization_endpoint"`
}

func discover(ctx context.Context, issuer string) (discovery, error) {
	var d discovery
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(issuer, "/")+"/.well-known/openid-configuration", nil)
	if err != nil {
		return d, err
	}
	res, err := newHTTPClient().Do(req)
	if err != nil {
		return d, fmt.Errorf("identity provider %s: %w", issuer, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return d, fmt.Errorf("identity provider %s: discovery answered %s", issuer, res.Status)
	}
	if err := json.NewDecoder(res.Body).Decode(&d); err != nil {
		return d, fmt.Errorf("identity provider %s: discovery document: %w", issuer, err)
	}
	if d.Issuer != issuer && d.Issuer != strings.TrimRight(issuer, "/") {
		return d, fmt.Errorf("identity provider %s: its discovery document names issuer %q", issuer, d.Issuer)
	}
	return d, nil
}

func (a *app) loginCommand() *cobra.Command {
	var device bool
	var port int
	cmd := &cobra.Command{
		Use:   "login [--server URL] [--context NAME] [--device] [--port N]",
		Short: "Sign in with the vendor's identity provider (single sign-on) and keep the session in a context",
		Long: `Sign in to imsd through the identity provider imsd names (OpenID Connect).
By default byoc opens a local loopback port, prints the provider's sign-in
URL (authorization code with PKCE) and waits for the browser to come back;
--device uses the device-code flow instead, for a terminal without a
browser: it prints a URL and a code to enter on any device.

The session (an ID token, refreshed by byoc before it expires, and the
refresh token) is kept in the context (--context, else the current one,
else a new context named after the server) in the config file, which only
you may read. imsd maps your identity provider groups to roles; see
byoc auth whoami.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.login(cmd.Context(), device, port)
		},
	}
	cmd.Flags().BoolVar(&device, "device", false, "use the device-code flow (no browser on this machine)")
	cmd.Flags().IntVar(&port, "port", 0, "loopback port for the browser's return (default: any free port)")
	return cmd
}

func (a *app) login(ctx context.Context, device bool, port int) error {
	path, err := configPath(a.getenv)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(path)
	if err != nil {
		return err
	}
	name := a.contextName
	if name == "" {
		name = cfg.CurrentContext
	}
	var cc ConfigContext
	if c := cfg.Context(name); c != nil {
		cc = *c
	}
	if a.server != "" && cc.Server != "" && !sameServer(a.server, cc.Server) {
		if a.contextName != "" {
			return usagef("context %q is for %s, not %s", name, cc.Server, a.server)
		}
		cc, name = ConfigContext{}, ""
	}
	if a.server != "" {
		cc.Server = a.server
	}
	if cc.Server == "" {
		return usagef("no server: pass --server URL (and --context NAME to name the context)")
	}
	if err := checkServerURL(cc.Server); err != nil {
		return &usageError{msg: err.Error()}
	}
	if name == "" {
		name = strings.NewReplacer("https://", "", "http://", "", ":", "-", "/", "-").Replace(strings.TrimRight(cc.Server, "/"))
	}
	cc.Name = name

	anon := imsv1connect.NewOperatorServiceClient(newHTTPClient(), strings.TrimRight(cc.Server, "/"))
	lc, err := anon.GetLoginConfig(ctx, connect.NewRequest(&imsv1.GetLoginConfigRequest{}))
	if err != nil {
		return (&client{target: &target{server: cc.Server, context: name}}).wrap(err)
	}
	if lc.Msg.GetIssuer() == "" {
		return fmt.Errorf("%s has no single sign-on (imsd --sso-config); use an API token: byoc context add %s --server %s --token TOKEN", cc.Server, name, cc.Server)
	}
	d, err := discover(ctx, lc.Msg.GetIssuer())
	if err != nil {
		return err
	}
	oc := &oauth2.Config{
		ClientID: lc.Msg.GetClientId(),
		Endpoint: oauth2.Endpoint{AuthURL: d.AuthorizationEndpoint, TokenURL: d.TokenEndpoint, DeviceAuthURL: d.DeviceAuthorizationEndpoint, AuthStyle: oauth2.AuthStyleInParams},
		Scopes:   append([]string{"openid", "offline_access"}, lc.Msg.GetScopes()...),
	}
	octx := context.WithValue(ctx, oauth2.HTTPClient, newHTTPClient())
	var tok *oauth2.Token
	if device {
		tok, err = a.deviceFlow(octx, oc)
	} else {
		tok, err = a.browserFlow(octx, oc, port)
	}
	if err != nil {
		return err
	}
	s, err := sessionFrom(tok, d.Issuer, oc)
	if err != nil {
		return err
	}
	cc.Token, cc.Session = "", s
	// Who imsd says we are, with our roles.
	c := imsv1connect.NewOperatorServiceClient(newHTTPClient(), strings.TrimRight(cc.Server, "/"), connect.WithInterceptors(bearer(s.IDToken)))
	who, err := c.WhoAmI(ctx, connect.NewRequest(&imsv1.WhoAmIRequest{}))
	if err != nil {
		return (&client{target: &target{server: cc.Server, context: name}}).wrap(err)
	}
	s.User = who.Msg.GetName()
	cfg.Put(cc)
	cfg.CurrentContext = name
	if err := saveConfig(path, cfg); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "signed in to %s as %s (context %s)\n", cc.Server, who.Msg.GetName(), name)
	for _, g := range who.Msg.GetGrants() {
		fmt.Fprintf(a.stdout, "  %s\n", grantText(g))
	}
	if len(who.Msg.GetGrants()) == 0 {
		fmt.Fprintln(a.stdout, "  no roles: none of your groups is mapped in imsd's SSO config")
	}
	return nil
}

// sessionFrom keeps what a token response holds.
func sessionFrom(tok *oauth2.Token, issuer string, oc *oauth2.Config) (*Session, error) {
	id, _ := tok.Extra("id_token").(string)
	if id == "" {
		return nil, errors.New("the identity provider sent no ID token (does the client allow the openid scope?)")
	}
	exp, err := idTokenExpiry(id)
	if err != nil {
		return nil, err
	}
	return &Session{IDToken: id, Expiry: exp, RefreshToken: tok.RefreshToken, Issuer: issuer, ClientID: oc.ClientID, TokenURL: oc.Endpoint.TokenURL}, nil
}

// idTokenExpiry reads an ID token's exp claim; imsd checks the token,
// byoc only needs to know when to refresh it.
func idTokenExpiry(raw string) (time.Time, error) {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return time.Time{}, errors.New("the ID token is not a JWT")
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, fmt.Errorf("the ID token's payload: %w", err)
	}
	var c struct {
		Exp int64 `json:"exp"`
	}
	if err := json.Unmarshal(b, &c); err != nil || c.Exp == 0 {
		return time.Time{}, fmt.Errorf("the ID token has no exp claim")
	}
	return time.Unix(c.Exp, 0).UTC(), nil
}

func (a *app) deviceFlow(ctx context.Context, oc *oauth2.Config) (*oauth2.Token, error) {
	if oc.Endpoint.DeviceAuthURL == "" {
		return nil, errors.New("the identity provider offers no device-code flow (no device_authorization_endpoint); run byoc login without --device")
	}
	da, err := oc.DeviceAuth(ctx)
	if err != nil {
		return nil, fmt.Errorf("device authorization: %w", err)
	}
	uri := da.VerificationURIComplete
	if uri == "" {
		uri = da.VerificationURI
	}
	fmt.Fprintf(a.stderr, "To sign in, open %s and enter the code %s\n", uri, da.UserCode)
	fmt.Fprintf(a.stderr, "device code: %s\n", da.UserCode)
	tok, err := oc.DeviceAccessToken(ctx, da)
	if err != nil {
		return nil, fmt.Errorf("device sign-in: %w", err)
	}
	return tok, nil
}

func (a *app) browserFlow(ctx context.Context, oc *oauth2.Config, port int) (*oauth2.Token, error) {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, fmt.Errorf("open the loopback port for the sign-in: %w", err)
	}
	defer ln.Close()
	oc.RedirectURL = fmt.Sprintf("http://127.0.0.1:%d/callback", ln.Addr().(*net.TCPAddr).Port)
	verifier := oauth2.GenerateVerifier()
	state := oauth2.GenerateVerifier()
	type result struct {
		code string
		err  error
	}
	done := make(chan result, 1)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		var res result
		switch {
		case q.Get("state") != state:
			res.err = errors.New("the sign-in came back with another state; start again")
		case q.Get("error") != "":
			res.err = fmt.Errorf("the identity provider refused: %s %s", q.Get("error"), q.Get("error_description"))
		default:
			res.code = q.Get("code")
		}
		if res.err != nil {
			http.Error(w, html.EscapeString(res.err.Error()), http.StatusBadRequest)
		} else {
			fmt.Fprintln(w, "Signed in to byoc. You may close this window.")
		}
		select {
		case done <- res:
		default:
		}
	})}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	defer srv.Close()
	u := oc.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier))
	fmt.Fprintf(a.stderr, "To sign in, open this URL in a browser on this machine:\n%s\n", u)
	var res result
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case res = <-done:
	}
	if res.err != nil {
		return nil, res.err
	}
	tok, err := oc.Exchange(ctx, res.code, oauth2.VerifierOption(verifier))
	if err != nil {
		return nil, fmt.Errorf("exchange the sign-in code: %w", err)
	}
	return tok, nil
}

// sessionToken returns the context's ID token, refreshing the session
// (and saving it) when the token expires within refreshBefore.
func (a *app) sessionToken(ctx context.Context, path string, cfg *Config, cc *ConfigContext) (string, error) {
	s := cc.Session
	if a.now().Add(refreshBefore).Before(s.Expiry) {
		return s.IDToken, nil
	}
	if s.RefreshToken == "" {
		return "", fmt.Errorf("the session of context %s expired at %s; run byoc login again", cc.Name, s.Expiry.Format(time.RFC3339))
	}
	oc := &oauth2.Config{ClientID: s.ClientID, Endpoint: oauth2.Endpoint{TokenURL: s.TokenURL, AuthStyle: oauth2.AuthStyleInParams}}
	octx := context.WithValue(ctx, oauth2.HTTPClient, newHTTPClient())
	tok, err := oc.TokenSource(octx, &oauth2.Token{RefreshToken: s.RefreshToken, Expiry: time.Unix(1, 0)}).Token()
	if err != nil {
		return "", fmt.Errorf("refresh the session of context %s: %w; run byoc login again", cc.Name, err)
	}
	ns, err := sessionFrom(tok, s.Issuer, oc)
	if err != nil {
		return "", fmt.Errorf("refresh the session of context %s: %w", cc.Name, err)
	}
	if ns.RefreshToken == "" {
		ns.RefreshToken = s.RefreshToken
	}
	ns.User = s.User
	cc.Session = ns
	if err := saveConfig(path, cfg); err != nil {
		return "", err
	}
	return ns.IDToken, nil
}
