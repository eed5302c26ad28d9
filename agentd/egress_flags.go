package main

import (
	"context"
	"flag"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/byoc-dev/byoc/agentd/egress"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
)

// egressFlags are agentd's flags for the network of the plugin sandbox.
type egressFlags struct {
	network                         string
	deny, allow, ports, insecureAdd multiFlag
}

func (e *egressFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&e.network, "sandbox-network", "proxy", "the `network` of every plugin's sandbox: proxy (a network namespace of its own whose only way out is the agent's egress proxy; loopback, link-local and the cloud's metadata and credential endpoints are refused), none, or host (the machine's own network, metadata service included; never in production)")
	fs.Var(&e.deny, "sandbox-egress-deny", "`CIDR` (or address) the egress proxy refuses as well (repeatable)")
	fs.Var(&e.allow, "sandbox-egress-allow", "`CIDR` (or address) the egress proxy allows; once given, only these (and the endpoints the agent is configured with) are reached; never re-opens loopback, link-local or the metadata endpoints (repeatable)")
	fs.Var(&e.ports, "sandbox-egress-port", "`port` the egress proxy allows; once given, only these (repeatable)")
	fs.Var(&e.insecureAdd, "insecure-sandbox-egress-allow", "`ADDRESS:PORT` the egress proxy allows although it is always refused otherwise (a service on this machine's loopback, say); a loopback address is also forwarded into the sandbox; every plugin can then reach it (repeatable)")
}

// build makes the plugins' Egress. endpoints are the URLs or HOST:PORT
// locations the agent itself was configured with (its imsd, the install
// registry, the cluster's API server): they stay reachable even when on
// the machine's loopback.
func (e *egressFlags) build(ctx context.Context, endpoints []string) (*pluginhost.Egress, error) {
	n, err := pluginhost.ParseNetwork(e.network)
	if err != nil {
		return nil, err
	}
	eg := &pluginhost.Egress{Network: n}
	for _, s := range e.deny {
		p, err := egress.ParsePrefix("--sandbox-egress-deny", s)
		if err != nil {
			return nil, err
		}
		eg.Policy.Deny = append(eg.Policy.Deny, p)
	}
	for _, s := range e.allow {
		p, err := egress.ParsePrefix("--sandbox-egress-allow", s)
		if err != nil {
			return nil, err
		}
		eg.Policy.Allow = append(eg.Policy.Allow, p)
	}
	for _, s := range e.ports {
		p, err := egress.ParsePort("--sandbox-egress-port", s)
		if err != nil {
			return nil, err
		}
		eg.Policy.Ports = append(eg.Policy.Ports, p)
	}
	for _, s := range e.insecureAdd {
		ap, err := egress.ParseException("--insecure-sandbox-egress-allow", s)
		if err != nil {
			return nil, err
		}
		// Once each: the relay listens on every loopback exception inside
		// the sandbox, and a second listener on one address would fail
		// every plugin's start.
		if !slices.Contains(eg.Policy.Exceptions, ap) {
			eg.Policy.Exceptions = append(eg.Policy.Exceptions, ap)
		}
	}
	for _, ep := range endpoints {
		aps, err := resolveEndpoint(ctx, ep)
		if err != nil {
			return nil, err
		}
		for _, ap := range aps {
			if !slices.Contains(eg.Policy.Exceptions, ap) {
				eg.Policy.Exceptions = append(eg.Policy.Exceptions, ap)
			}
		}
	}
	return eg, nil
}

// insecureWarning is the warning agentd prints when
// --insecure-sandbox-egress-allow is given (and the sandbox is on):
// each address once, in the order first given, in the form the proxy
// holds it (a flag repeated, or ::ffff:127.0.0.1:5000 beside
// 127.0.0.1:5000, is one exception). "" when the flag is not given.
func (e *egressFlags) insecureWarning() string {
	var list []string
	for _, s := range e.insecureAdd {
		// build refused an address that does not parse before this is
		// printed; one that does not is listed as given.
		if ap, err := egress.ParseException("--insecure-sandbox-egress-allow", s); err == nil {
			s = ap.String()
		}
		if !slices.Contains(list, s) {
			list = append(list, s)
		}
	}
	if len(list) == 0 {
		return ""
	}
	return "agentd: WARNING: --insecure-sandbox-egress-allow: every plugin can reach " + strings.Join(list, ", ")
}

// resolveEndpoint finds the addresses and port of a configured endpoint:
// a URL, or HOST[:PORT][/PATH] (https). An empty one, an oci: layout or
// a name that does not resolve yields none.
func resolveEndpoint(ctx context.Context, ep string) ([]netip.AddrPort, error) {
	if ep == "" || strings.HasPrefix(ep, "oci:") {
		return nil, nil
	}
	if !strings.Contains(ep, "://") {
		ep = "https://" + ep
	}
	u, err := url.Parse(ep)
	if err != nil || u.Hostname() == "" {
		return nil, nil
	}
	port := u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	p, err := egress.ParsePort("endpoint "+ep, port)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		addrs = []netip.Addr{a}
	} else {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		// A name that does not resolve now is not an exception: the
		// proxy checks it as any other name when a plugin asks.
		addrs, _ = net.DefaultResolver.LookupNetIP(ctx, "ip", u.Hostname())
	}
	var out []netip.AddrPort
	for _, a := range addrs {
		out = append(out, netip.AddrPortFrom(a.Unmap().WithZone(""), p))
	}
	return out, nil
}

// kubeconfigServers are the API servers a kubeconfig names.
func kubeconfigServers(path string) []string {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var kc struct {
		Clusters []struct {
			Cluster struct {
				Server string `yaml:"server"`
			} `yaml:"cluster"`
		} `yaml:"clusters"`
	}
	if yaml.Unmarshal(b, &kc) != nil {
		return nil
	}
	var out []string
	for _, c := range kc.Clusters {
		if c.Cluster.Server != "" {
			out = append(out, c.Cluster.Server)
		}
	}
	return out
}

// egressWarning is printed at start under --sandbox-network=host.
func egressWarning(n pluginhost.Network) string {
	if n != pluginhost.NetworkHost {
		return ""
	}
	return "agentd: WARNING: --sandbox-network=host: plugins share this machine's network; vendor code can reach the instance metadata service " +
		"(and take this machine's role's credentials), services on localhost and everything this machine can reach"
}
