package cluster

import (
	"net"
	"strconv"
	"testing"
)

// FreeAddr's ports lie below the kernel's ephemeral range, so that no
// outgoing connection can take one while the process that owns it is
// down (port 0 picks from that very range), and none is handed out twice.
func TestFreeAddrAvoidsEphemeralPorts(t *testing.T) {
	lo := ephemeralLow()
	if lo <= freeAddrLow+1000 {
		t.Skipf("ephemeral ports start at %d: no room below", lo)
	}
	seen := map[string]bool{}
	for range 50 {
		addr := FreeAddr(t)
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		if port < freeAddrLow || port >= lo {
			t.Fatalf("FreeAddr = %s: port outside [%d, %d)", addr, freeAddrLow, lo)
		}
		if seen[addr] {
			t.Fatalf("FreeAddr handed out %s twice", addr)
		}
		seen[addr] = true
	}
}
