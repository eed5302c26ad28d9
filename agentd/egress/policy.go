// Package egress is the agent's egress proxy for vendor code: each
// plugin sandbox has a network namespace of its own whose only way out is
// a relay to a Proxy the agent serves outside the sandbox (HTTP CONNECT,
// plain HTTP forwarding and SOCKS5 on one socket). The proxy resolves
// names itself, checks every address it would connect to against a
// Policy and dials exactly the address it checked, so a name that
// resolves to the instance metadata service or the machine's loopback is
// refused however it is spelled.
package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// alwaysDenied are the destinations vendor code never reaches, whatever
// the customer allows (but for an exact Exception): the machine's own
// services and the cloud's credential endpoints.
var alwaysDenied = []struct {
	prefix netip.Prefix
	rule   string
	// credential marks the cloud's credentials services and link-local
	// addresses (CredentialEndpoint).
	credential bool
}{
	{netip.MustParsePrefix("169.254.169.254/32"), "instance metadata service (169.254.169.254)", true},
	{netip.MustParsePrefix("169.254.170.2/32"), "container credentials endpoint (169.254.170.2)", true},
	{netip.MustParsePrefix("169.254.170.23/32"), "EKS pod identity endpoint (169.254.170.23)", true},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "instance metadata service (fd00:ec2::254)", true},
	{netip.MustParsePrefix("fd00:ec2::23/128"), "EKS pod identity endpoint (fd00:ec2::23)", true},
	{netip.MustParsePrefix("100.100.100.200/32"), "instance metadata service (100.100.100.200)", true},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback (127.0.0.0/8)", false},
	{netip.MustParsePrefix("::1/128"), "loopback (::1)", false},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (169.254.0.0/16)", true},
	{netip.MustParsePrefix("fe80::/10"), "link-local (fe80::/10)", true},
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified (0.0.0.0/8)", false},
	{netip.MustParsePrefix("::/128"), "unspecified (::)", false},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast (224.0.0.0/4)", false},
	{netip.MustParsePrefix("ff00::/8"), "multicast (ff00::/8)", false},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast (255.255.255.255)", false},
}

// embedded4 are IPv6 prefixes that carry an IPv4 address in their last
// 32 bits (IPv4-compatible, IPv4-translated and NAT64): checked as that
// IPv4 address too. IPv4-mapped addresses (::ffff:a.b.c.d) are unmapped
// before any check; 6to4 (2002:AABB:CCDD::/48) carries one in bits 16-47.
var embedded4 = []netip.Prefix{
	netip.MustParsePrefix("::/96"),
	netip.MustParsePrefix("::ffff:0:0:0/96"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
}

var sixToFour = netip.MustParsePrefix("2002::/16")

// Policy says where vendor code may connect. The zero Policy allows
// every destination but the always-denied ones.
type Policy struct {
	// Deny are more destinations refused (agentd --sandbox-egress-deny).
	Deny []netip.Prefix
	// Allow, when not empty, are the only destinations allowed (agentd
	// --sandbox-egress-allow); they cannot re-open an always-denied one.
	Allow []netip.Prefix
	// Ports, when not empty, are the only ports allowed (agentd
	// --sandbox-egress-port).
	Ports []uint16
	// Exceptions are exact addresses allowed although always denied:
	// the endpoints the agent itself was configured with (its imsd, the
	// install registry, the cluster's API server) and those the customer
	// names with agentd --insecure-sandbox-egress-allow. They pass Deny,
	// Allow and Ports too.
	Exceptions []netip.AddrPort
}

// Check says whether a connection to ap is allowed and, when not, which
// rule refuses it.
func (p *Policy) Check(ap netip.AddrPort) (ok bool, rule string) {
	addr := ap.Addr().WithZone("")
	if addr.Is4In6() {
		addr = addr.Unmap()
	}
	ap = netip.AddrPortFrom(addr, ap.Port())
	if p != nil && slices.Contains(p.Exceptions, ap) {
		return true, ""
	}
	if !addr.IsValid() {
		return false, "not an address"
	}
	if r := inEveryForm(addr, denied); r != "" {
		return false, r
	}
	if p == nil {
		return true, ""
	}
	for _, d := range p.Deny {
		if d.Contains(addr) {
			return false, "--sandbox-egress-deny " + d.String()
		}
	}
	if len(p.Allow) > 0 && !slices.ContainsFunc(p.Allow, func(a netip.Prefix) bool { return a.Contains(addr) }) {
		return false, "not in --sandbox-egress-allow"
	}
	if len(p.Ports) > 0 && !slices.Contains(p.Ports, ap.Port()) {
		return false, "port not in --sandbox-egress-port"
	}
	return true, ""
}

// inEveryForm is rule(addr), or rule of the IPv4 address addr carries
// embedded (6to4, IPv4-compatible, IPv4-translated, NAT64); "" when
// neither has a rule. addr is unmapped and without a zone.
func inEveryForm(addr netip.Addr, rule func(netip.Addr) string) string {
	if r := rule(addr); r != "" {
		return r
	}
	if !addr.Is6() {
		return ""
	}
	if sixToFour.Contains(addr) {
		b := addr.As16()
		if r := rule(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})); r != "" {
			return r + " embedded in " + sixToFour.String()
		}
	}
	for _, e := range embedded4 {
		if e.Contains(addr) {
			b := addr.As16()
			if r := rule(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})); r != "" {
				return r + " embedded in " + e.String()
			}
		}
	}
	return ""
}

// CredentialEndpoint says why a is the cloud's instance metadata or
// credentials service, or another link-local address, in any form Check
// knows ("" when it is none): what the agent's own telemetry scrapes
// never reach, whatever the vendor's declaration names. Unlike Check it
// allows loopback and every other address: the customer's metrics
// endpoints may be on this machine.
func CredentialEndpoint(a netip.Addr) string {
	a = a.WithZone("")
	if a.Is4In6() {
		a = a.Unmap()
	}
	if !a.IsValid() {
		return "not an address"
	}
	return inEveryForm(a, func(a netip.Addr) string {
		for _, d := range alwaysDenied {
			if d.credential && d.prefix.Contains(a) {
				return d.rule
			}
		}
		if a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() {
			return "link-local"
		}
		return ""
	})
}

func denied(a netip.Addr) string {
	for _, d := range alwaysDenied {
		if d.prefix.Contains(a) {
			return "always denied: " + d.rule
		}
	}
	// What the table may miss: every other loopback, link-local,
	// multicast or unspecified form.
	switch {
	case a.IsLoopback():
		return "always denied: loopback"
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		return "always denied: link-local"
	case a.IsMulticast(), a.IsInterfaceLocalMulticast():
		return "always denied: multicast"
	case a.IsUnspecified():
		return "always denied: unspecified"
	}
	return ""
}

// ParsePrefix reads a customer's CIDR (or a single address) for Deny or
// Allow. flag names the flag in errors.
func ParsePrefix(flag, s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%s %q: not a CIDR such as 10.0.0.0/8 or fd00::/8: %v", flag, s, err)
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%s %q: not a CIDR or an address: %v", flag, s, err)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// ParsePort reads a port for Ports.
func ParsePort(flag, s string) (uint16, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%s %q: not a port (1-65535)", flag, s)
	}
	return uint16(n), nil
}

// ParseException reads an exact ADDRESS:PORT for Exceptions.
func ParseException(flag, s string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(strings.TrimSpace(s))
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%s %q: want an address and port such as 127.0.0.1:5000 or [::1]:5000: %v", flag, s, err)
	}
	if ap.Port() == 0 {
		return netip.AddrPort{}, fmt.Errorf("%s %q: port 0", flag, s)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

// ErrDenied is wrapped by the errors of refused connections.
var ErrDenied = errors.New("refused by the sandbox's egress policy")
