package agentwire

// HTTP/2 frame and SETTINGS encoding, and the request header block as the
// stream sees it.

import (
	"encoding/binary"
	"strings"

	"golang.org/x/net/http2/hpack"
)

// HTTP/2 frame types.
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	framePriority     = 0x2
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePushPromise  = 0x5
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9
)

// Frame flags.
const (
	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20
)

// SETTINGS parameters.
const (
	settingHeaderTableSize      = 0x1
	settingEnablePush           = 0x2
	settingMaxConcurrentStreams = 0x3
	settingInitialWindowSize    = 0x4
	settingMaxFrameSize         = 0x5
	settingMaxHeaderListSize    = 0x6
)

// HTTP/2 error codes.
const (
	errNo             = 0x0
	errProtocol       = 0x1
	errInternal       = 0x2
	errFlowControl    = 0x3
	errStreamClosed   = 0x5
	errFrameSize      = 0x6
	errRefusedStream  = 0x7
	errCancel         = 0x8
	errCompression    = 0x9
	errEnhanceYourCal = 0xb
)

// requestHeaders is what routing and serving look at in a request.
type requestHeaders struct {
	method, path, contentType string
	encoding, acceptEncoding  string
	timeout                   bool
	endStream, bad            bool
	size                      int
	pseudoDone                bool
}

func (h *requestHeaders) emit(f hpack.HeaderField) {
	h.size += len(f.Name) + len(f.Value) + 32
	if strings.HasPrefix(f.Name, ":") {
		if h.pseudoDone {
			h.bad = true
		}
	} else {
		h.pseudoDone = true
	}
	switch f.Name {
	case ":method":
		h.method = f.Value
	case ":path":
		h.path = f.Value
	case "content-type":
		h.contentType = f.Value
	case "connect-content-encoding":
		h.encoding = f.Value
	case "connect-accept-encoding":
		h.acceptEncoding = f.Value
	case "connect-timeout-ms":
		h.timeout = true
	}
}

// isAgentStream reports whether this package serves the request: the agent
// stream, in the Connect protocol with protobuf, without a deadline (which
// connect-go's handler honours and this server does not), compressed with
// gzip if at all.
func (h *requestHeaders) isAgentStream() bool {
	return !h.bad && h.size <= maxHeaderListSize && !h.endStream && !h.timeout &&
		h.method == "POST" && h.path == Path && strings.EqualFold(h.contentType, contentType) &&
		(h.encoding == "" || h.encoding == "identity" || h.encoding == "gzip")
}

// acceptsGzip reports whether the client's connect-accept-encoding lists gzip.
func (h *requestHeaders) acceptsGzip() bool {
	for e := range strings.SplitSeq(h.acceptEncoding, ",") {
		if strings.TrimSpace(e) == "gzip" {
			return true
		}
	}
	return false
}

func parseFrameHeader(b []byte) (length uint32, typ, flags byte, stream uint32) {
	return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]), b[3], b[4], binary.BigEndian.Uint32(b[5:9]) & (1<<31 - 1)
}

func appendFrameHeader(b []byte, length int, typ, flags byte, stream uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), typ, flags,
		byte(stream>>24), byte(stream>>16), byte(stream>>8), byte(stream))
}

// headerFragment strips a HEADERS frame's padding and priority fields.
func headerFragment(p []byte, flags byte) ([]byte, bool) {
	p, ok := unpad(p, flags)
	if !ok {
		return nil, false
	}
	if flags&flagPriority != 0 {
		if len(p) < 5 {
			return nil, false
		}
		p = p[5:]
	}
	return p, true
}

func unpad(p []byte, flags byte) ([]byte, bool) {
	if flags&flagPadded == 0 {
		return p, true
	}
	if len(p) < 1 || int(p[0]) >= len(p) {
		return nil, false
	}
	return p[1 : len(p)-int(p[0])], true
}

func appendSetting(b []byte, id uint16, v uint32) []byte {
	b = binary.BigEndian.AppendUint16(b, id)
	return binary.BigEndian.AppendUint32(b, v)
}
