package agentwire

// Sniff: deciding from a new h2c connection's first header block whether it
// is the agent stream.

import (
	"errors"
	"net"
	"time"

	"golang.org/x/net/http2/hpack"
)

// Sniff reads a new h2c connection's frames after the client preface, up
// to the end of the client's first header block, within deadline. agent
// reports whether that request is the agent stream in the Connect
// protocol, which this package serves; raw is every byte read, to be
// replayed to another server or given to ServeConn. Sniff keeps nothing,
// reads at most 16 KiB, and fails with ErrHeaderFlood on a header block
// of more CONTINUATION frames than a client sends.
func Sniff(c net.Conn, deadline time.Time) (raw []byte, agent bool, err error) {
	c.SetReadDeadline(deadline)
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, 0, 1024)
	var dec *hpack.Decoder
	var h requestHeaders
	off := 0 // start of the next unparsed frame
	inBlock := false
	continuations := 0
	for {
		// Parse what is buffered.
		for len(buf)-off >= frameHeaderLen {
			length, typ, flags, _ := parseFrameHeader(buf[off:])
			if length > maxFrameSize {
				return buf, false, nil // let the standard server say so
			}
			if len(buf)-off < frameHeaderLen+int(length) {
				break
			}
			payload := buf[off+frameHeaderLen : off+frameHeaderLen+int(length)]
			off += frameHeaderLen + int(length)
			switch {
			case typ == frameHeaders && !inBlock:
				frag, ok := headerFragment(payload, flags)
				if !ok {
					return buf, false, nil
				}
				h.endStream = flags&flagEndStream != 0
				dec = hpack.NewDecoder(4096, h.emit)
				dec.SetMaxStringLength(maxHeaderListSize)
				if _, err := dec.Write(frag); err != nil {
					return buf, false, nil
				}
				inBlock = true
			case typ == frameContinuation && inBlock:
				if continuations++; continuations > maxContinuations {
					return buf, false, ErrHeaderFlood
				}
				if _, err := dec.Write(payload); err != nil {
					return buf, false, nil
				}
			case inBlock:
				return buf, false, nil // anything else inside a header block
			default:
				continue // SETTINGS, WINDOW_UPDATE, PRIORITY... before the request
			}
			if flags&flagEndHeaders != 0 {
				if dec.Close() != nil {
					return buf, false, nil
				}
				return buf, h.isAgentStream(), nil
			}
		}
		if len(buf) >= sniffMax {
			return buf, false, nil
		}
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, cap(buf))...)[:len(buf)]
		}
		n, err := c.Read(buf[len(buf):min(cap(buf), sniffMax)])
		buf = buf[:len(buf)+n]
		if err != nil {
			return buf, false, err
		}
	}
}

// ErrHeaderFlood is Sniff's error for a first header block of more
// CONTINUATION frames than any client sends: the connection is an attack
// (CVE-2023-45288), to be closed rather than served.
var ErrHeaderFlood = errors.New("agentwire: header block of too many CONTINUATION frames")
