package egress

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// SOCKS5 (RFC 1928), CONNECT only, no authentication: what curl's
// ALL_PROXY=socks5h:// and Go's golang.org/x/net/proxy speak.
const (
	socksVersion    = 5
	socksNoAuth     = 0
	socksNoMethods  = 0xff
	socksConnect    = 1
	socksIPv4       = 1
	socksName       = 3
	socksIPv6       = 4
	socksOK         = 0
	socksFailure    = 1
	socksNotAllowed = 2
	socksRefused    = 5
	socksNoCommand  = 7
	socksNoAddrType = 8
)

func (p *Proxy) socks(ctx context.Context, c net.Conn, br *bufio.Reader, lr *io.LimitedReader) {
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return
	}
	ok := false
	for _, m := range methods {
		ok = ok || m == socksNoAuth
	}
	if !ok {
		_, _ = c.Write([]byte{socksVersion, socksNoMethods})
		return
	}
	if _, err := c.Write([]byte{socksVersion, socksNoAuth}); err != nil {
		return
	}
	var req [4]byte
	if _, err := io.ReadFull(br, req[:]); err != nil || req[0] != socksVersion {
		return
	}
	var host string
	switch req[3] {
	case socksIPv4:
		var b [4]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return
		}
		host = netip.AddrFrom4(b).String()
	case socksIPv6:
		var b [16]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return
		}
		host = netip.AddrFrom16(b).String()
	case socksName:
		n, err := br.ReadByte()
		if err != nil {
			return
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return
		}
		host = string(b)
	default:
		socksReply(c, socksNoAddrType)
		return
	}
	var pb [2]byte
	if _, err := io.ReadFull(br, pb[:]); err != nil {
		return
	}
	if req[1] != socksConnect {
		socksReply(c, socksNoCommand)
		return
	}
	lr.N = math.MaxInt64
	up, err := p.dial(ctx, net.JoinHostPort(host, strconv.Itoa(int(binary.BigEndian.Uint16(pb[:])))))
	if err != nil {
		code := byte(socksRefused)
		switch {
		case errors.Is(err, ErrDenied):
			code = socksNotAllowed
		case ctx.Err() != nil, errors.Is(err, ErrNotLive):
			code = socksFailure
		}
		socksReply(c, code)
		return
	}
	defer up.Close()
	_ = c.SetDeadline(time.Time{})
	if !socksReply(c, socksOK) {
		return
	}
	p.splice(c, br, up)
}

// socksReply answers a request with code (and no bound address).
func socksReply(c net.Conn, code byte) bool {
	_, err := c.Write([]byte{socksVersion, code, 0, socksIPv4, 0, 0, 0, 0, 0, 0})
	return err == nil
}
