package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// RegistryAccess is what a job's exchanged registry grant gives its
// plugin: the vendor registry and a token for exactly the job's
// repositories.
type RegistryAccess struct {
	// Host is the registry's host:port.
	Host string
	// PlainHTTP is set for an http:// registry (loopback).
	PlainHTTP bool
	Token     string
}

// The operation environment of a job that carried a grant (the image and
// build types read it).
const (
	VendorRegistryEnv  = "BYOC_VENDOR_REGISTRY"
	VendorPlainHTTPEnv = "BYOC_VENDOR_REGISTRY_PLAIN_HTTP"
	VendorTokenEnv     = "BYOC_VENDOR_REGISTRY_TOKEN"
)

// Env is a as the operation's environment.
func (a RegistryAccess) Env() map[string]string {
	env := map[string]string{VendorRegistryEnv: a.Host, VendorTokenEnv: a.Token}
	if a.PlainHTTP {
		env[VendorPlainHTTPEnv] = "1"
	}
	return env
}

// exchangeTimeout bounds one grant exchange with imsd.
const exchangeTimeout = 30 * time.Second

// exchangeGrant trades the job's one-time grant for a registry token at
// imsd's token endpoint (the Docker token specification), signing the
// exchange with the agent's key. It is called once, right before the
// job's plugin runs; a grant exchanged before is refused by imsd.
func (a *Agent) exchangeGrant(ctx context.Context, jobID string, g *agentv1.RegistryGrant) (RegistryAccess, error) {
	reg, err := url.Parse(g.GetRegistry())
	if err != nil || reg.Host == "" || (reg.Scheme != "http" && reg.Scheme != "https") {
		return RegistryAccess{}, fmt.Errorf("grant %s: registry %q is not http://HOST:PORT or https://HOST", g.GetId(), g.GetRegistry())
	}
	q := url.Values{"service": {g.GetService()}}
	for _, s := range g.GetScopes() {
		q.Add("scope", s)
	}
	ctx, cancel := context.WithTimeout(ctx, exchangeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(a.cfg.IMSURL, "/")+"/v2/token?"+q.Encode(), nil)
	if err != nil {
		return RegistryAccess{}, err
	}
	req.SetBasicAuth(a.id.AgentID, agentproto.GrantExchangePassword(a.privateKey(), a.id.AgentID, g.GetId(), g.GetSecret(), a.cfg.Now()))
	if a.cfg.Ledger != nil {
		// What leaves: the query (service, scopes) and the Authorization
		// header (agent id, grant id, signature).
		a.cfg.Ledger.RecordBytes("registry_token", jobID, []byte(req.URL.RawQuery+"\n"+req.Header.Get("Authorization")))
	}
	resp, err := a.tokenClient.Do(req)
	if err != nil {
		return RegistryAccess{}, fmt.Errorf("exchange grant %s with imsd: %w", g.GetId(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return RegistryAccess{}, fmt.Errorf("exchange grant %s with imsd: %w", g.GetId(), err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Errors []struct{ Message string } `json:"errors"`
		}
		msg := resp.Status
		if json.Unmarshal(body, &e) == nil && len(e.Errors) > 0 {
			msg = e.Errors[0].Message
		}
		return RegistryAccess{}, fmt.Errorf("imsd refused the registry grant %s: %s", g.GetId(), msg)
	}
	var t struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(body, &t); err != nil || t.Token == "" {
		return RegistryAccess{}, errors.New("imsd's token endpoint answered without a token")
	}
	return RegistryAccess{Host: reg.Host, PlainHTTP: reg.Scheme == "http", Token: t.Token}, nil
}
