package pluginhost

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/agentd/egress"
	"github.com/byoc-dev/byoc/plugins/action/sandbox"
)

// Network is what network a sandboxed plugin has.
type Network string

// The networks, safest last but one.
const (
	// NetworkProxy: a network namespace of its own whose only way out
	// is the agent's egress proxy (package egress), reached at
	// 127.0.0.1:PORT inside through a relay; HTTP_PROXY, HTTPS_PROXY
	// and ALL_PROXY point there. The default.
	NetworkProxy Network = "proxy"
	// NetworkNone: a network namespace with nothing in it.
	NetworkNone Network = "none"
	// NetworkHost: the machine's own network, instance metadata service
	// and loopback services included (agentd --sandbox-network=host).
	NetworkHost Network = "host"
)

// ParseNetwork reads agentd --sandbox-network.
func ParseNetwork(s string) (Network, error) {
	switch n := Network(s); n {
	case NetworkProxy, NetworkNone, NetworkHost:
		return n, nil
	case "":
		return NetworkProxy, nil
	}
	return "", fmt.Errorf("--sandbox-network %q: want proxy, none or host", s)
}

// DefaultEgressPort is where a sandbox reaches its proxy, on its own
// 127.0.0.1, unless a forwarded endpoint uses that port.
const DefaultEgressPort = 3128

// Egress configures sandboxed plugins' network. The zero value is
// NetworkProxy with the always-denied destinations refused and nothing
// else.
type Egress struct {
	Network Network
	Policy  egress.Policy
	// MaxConns, IdleTimeout: the proxy's limits per sandbox (package
	// egress's defaults when zero).
	MaxConns    int
	IdleTimeout time.Duration
	// Resolver and Dial replace the proxy's (tests).
	Resolver egress.Resolver
	Dial     func(ctx context.Context, network, addr string) (net.Conn, error)
}

func (l *Loader) network() Network {
	if l.Egress == nil || l.Egress.Network == "" {
		return NetworkProxy
	}
	return l.Egress.Network
}

// forwards are the exceptions on the host's IPv4 loopback: clients
// never send loopback addresses through a proxy, so the relay listens
// on each inside and tunnels it out.
func (e *Egress) forwards() []string {
	if e == nil {
		return nil
	}
	var out []string
	for _, ap := range e.Policy.Exceptions {
		// Each once: the relay cannot listen twice on one address.
		if ap.Addr().Is4() && ap.Addr().IsLoopback() && !slices.Contains(out, ap.String()) {
			out = append(out, ap.String())
		}
	}
	return out
}

// port is the relay's port inside the sandbox.
func (e *Egress) port() int {
	taken := map[int]bool{}
	for _, f := range e.forwards() {
		taken[int(netip.MustParseAddrPort(f).Port())] = true
	}
	p := DefaultEgressPort
	for taken[p] {
		p++
	}
	return p
}

// EgressEnv is the environment that sends a sandboxed plugin's clients
// (Go's, curl, terraform and its providers, helm) through the proxy;
// nil unless the network is NetworkProxy. The agent gives it to every
// plugin and every operation (an action's steps inherit it).
func (l *Loader) EgressEnv() map[string]string {
	if !l.sandboxed() || l.network() != NetworkProxy {
		return nil
	}
	addr := "127.0.0.1:" + strconv.Itoa(l.Egress.port())
	env := map[string]string{}
	for k, v := range map[string]string{
		"HTTP_PROXY":  "http://" + addr,
		"HTTPS_PROXY": "http://" + addr,
		"ALL_PROXY":   "socks5h://" + addr,
		// The sandbox's own loopback: nothing there but the relay and
		// the forwarded endpoints, which clients reach directly.
		"NO_PROXY": "localhost,127.0.0.1,::1",
	} {
		env[k], env[strings.ToLower(k)] = v, v
	}
	return env
}

// DescribeNetwork says in one line what network plugins have.
func (l *Loader) DescribeNetwork() string {
	if !l.sandboxed() {
		return "host network (no sandbox)"
	}
	switch l.network() {
	case NetworkHost:
		return "HOST network (--sandbox-network=host): vendor code reaches the instance metadata service, the machine's loopback services and everything the machine can"
	case NetworkNone:
		return "no network (--sandbox-network=none)"
	}
	var p egress.Policy
	if l.Egress != nil {
		p = l.Egress.Policy
	}
	s := "egress proxy only: loopback, link-local, the instance metadata and container credential endpoints always refused"
	if len(p.Deny) > 0 {
		s += fmt.Sprintf("; denied %s", prefixes(p.Deny))
	}
	if len(p.Allow) > 0 {
		s += fmt.Sprintf("; only %s", prefixes(p.Allow))
	}
	if len(p.Ports) > 0 {
		s += fmt.Sprintf("; ports %v", p.Ports)
	}
	if len(p.Exceptions) > 0 {
		var es []string
		for _, e := range p.Exceptions {
			es = append(es, e.String())
		}
		s += "; exceptions " + strings.Join(es, ", ")
	}
	return s
}

func prefixes(ps []netip.Prefix) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.String())
	}
	return strings.Join(s, ", ")
}

// egressSocket is the proxy's socket in a plugin's socket directory,
// which the sandbox shows.
const egressSocket = "egress.sock"

// proxyRun is one plugin's egress proxy.
type proxyRun struct {
	cancel  context.CancelFunc
	done    chan struct{}
	denials *egress.Denials
}

// startProxy serves a sandbox's proxy on a socket in sockDir and
// returns the relay the sandbox runs.
// A lease (StartOptions.Lease) gates it: once the lease has run out,
// nothing more goes upstream.
func (l *Loader) startProxy(sockDir string, onDeny func(egress.Denial), lease *leaseKeeper) (*proxyRun, *sandbox.Relay, error) {
	path := filepath.Join(sockDir, egressSocket)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, nil, fmt.Errorf("egress proxy: %w", err)
	}
	e := l.Egress
	if e == nil {
		e = &Egress{}
	}
	d := &egress.Denials{Report: onDeny}
	px := &egress.Proxy{Policy: &e.Policy, Resolver: e.Resolver, Dial: e.Dial, MaxConns: e.MaxConns, IdleTimeout: e.IdleTimeout, OnDeny: d.Add}
	if lease != nil {
		px.Live = lease.live
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := &proxyRun{cancel: cancel, done: make(chan struct{}), denials: d}
	go func() {
		defer close(run.done)
		_ = px.Serve(ctx, ln)
	}()
	return run, &sandbox.Relay{Socket: path, Port: e.port(), Forwards: e.forwards()}, nil
}

func (r *proxyRun) stop() {
	if r == nil {
		return
	}
	r.cancel()
	<-r.done
}
