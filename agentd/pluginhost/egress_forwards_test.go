package pluginhost

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/byoc-dev/byoc/agentd/egress"
)

// An exception listed twice is forwarded into the sandbox once: the
// relay listens on each forward, and a second listener on one address
// failed every plugin's start ("bind: address already in use"; e2e runs
// whose registries reused a port listed the port twice).
func TestForwardsOnce(t *testing.T) {
	ap := func(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
	e := &Egress{Policy: egress.Policy{Exceptions: []netip.AddrPort{ap("127.0.0.1:5000"), ap("10.0.0.1:443"), ap("127.0.0.1:6443"), ap("127.0.0.1:5000")}}}
	if got, want := e.forwards(), []string{"127.0.0.1:5000", "127.0.0.1:6443"}; !slices.Equal(got, want) {
		t.Fatalf("forwards %v, want %v", got, want)
	}
}
