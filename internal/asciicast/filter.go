package asciicast

import (
	"bytes"
	"io"
	"strconv"
	"unicode/utf8"
)

// Safe wraps w, a terminal a recording is replayed on, so that the
// recorded program reaches no further than the screen. It drops the
// control strings: OSC (ESC ]: set the clipboard with OSC 52, the window
// title, hyperlinks), DCS (ESC P), SOS (ESC X), PM (ESC ^) and APC (ESC
// _), each up to its terminator (BEL or ST, ESC \), and their
// one-character C1 forms (U+0090, U+0098, U+009D, U+009E, U+009F). It
// drops too the control sequences (CSI, ESC [ or U+009B) that make the
// terminal answer on its input (device status and attributes, window
// reports, mode and version requests) or change what the viewer's own
// keys and mouse send after the replay (mouse and focus reporting,
// modified-key and keyboard protocol modes), and those that move,
// resize or iconify the window. Everything else, the escape sequences
// that draw the screen (colours, cursor moves, clearing, the alternate
// screen), passes, so the replay still looks as it did. The recorded side
// chose those bytes: the vendor's operator in a support session the
// customer watches, or the customer's machine in one the vendor replays;
// a terminal that obeys OSC 52 would put whatever they chose on the
// viewer's clipboard.
func Safe(w io.Writer) io.Writer { return &safeWriter{w: w} }

// maxCSI bounds the control sequence held while its final byte is
// awaited: a longer one is dropped whole.
const maxCSI = 64

// safeWriter's state: in a control string, just after an ESC (in a
// control string or not), or in a control sequence, carried from one
// Write to the next.
type safeWriter struct {
	w        io.Writer
	inString bool
	esc      bool
	// c2 is a pending 0xC2, the first byte of a two-byte character that
	// may be a C1 control.
	c2 bool
	// csi holds the control sequence read so far (its introducer and
	// parameter and intermediate bytes) while inCSI; tooLong once it
	// passed maxCSI (the rest is then read and dropped).
	inCSI   bool
	tooLong bool
	csi     []byte
	// char holds the bytes of the character being written (its length
	// is cap(char)) until it is complete, in charBuf.
	char    []byte
	charBuf [4]byte
	out     []byte
}

func (s *safeWriter) Write(p []byte) (int, error) {
	s.out = s.out[:0]
	for _, b := range p {
		if s.c2 {
			s.c2 = false
			switch {
			case isC1String(b):
				s.endCSI()
				s.inString = true
				continue
			case b == 0x9a: // DECID as a C1 control: asks the terminal who it is
				continue
			case b == 0x9c && s.inString: // ST as a C1 control
				s.inString = false
				continue
			case b == 0x9b && !s.inString: // CSI as a C1 control
				s.startCSI(0xc2, 0x9b)
				continue
			}
			if !s.inString && !s.inCSI {
				if b >= 0x80 && b <= 0xbf {
					s.out = append(s.out, 0xc2, b) // the pair is a character
					continue
				} else {
					// A lone 0xC2 is not UTF-8: shown as U+FFFD, so that no
					// byte of a later write can make it a C1 control.
					s.out = append(s.out, "\uFFFD"...)
				}
			}
		}
		if s.esc && b >= 0x80 {
			// Not an escape sequence's byte: the ESC is dropped and the
			// byte taken as it comes (ESC U+009D must not pass as ESC
			// and a character: the terminal would open an OSC).
			s.esc = false
		}
		switch {
		case s.esc && (b < 0x20 || b == 0x7f) && b != 0x18 && b != 0x1a:
			// A terminal runs a C0 control met after an ESC (and ignores
			// DEL) and is still after the ESC (a second ESC only starts
			// again): so is the filter, or ESC ESC ], ESC LF ] or ESC DEL
			// ] would open an OSC on the terminal that the filter let
			// through.
			if !s.inString && b != 0x1b && b != 0x7f {
				s.out = append(s.out, b)
			}
		case s.esc:
			s.esc = false
			switch {
			case s.inString && b == '\\':
				s.inString = false
			case s.inString:
				// Not a terminator: still inside the string.
			case b == ']' || b == 'P' || b == 'X' || b == '^' || b == '_':
				s.inString = true
			case b == '[':
				s.startCSI(0x1b, '[')
			default:
				s.out = append(s.out, 0x1b, b)
			}
		case b == 0x1b:
			s.endCSI() // an ESC cancels a control sequence
			s.flushChar()
			s.esc = true
		case b == 0xc2:
			if s.inCSI { // not a control sequence's byte: it ends unfinished
				s.endCSI()
			}
			s.flushChar() // a character cut short
			s.c2 = true
		case s.inString:
			if b == 0x07 { // BEL ends an OSC
				s.inString = false
			}
		case s.inCSI && b >= 0x20 && b <= 0x3f: // parameter and intermediate bytes
			if len(s.csi) >= maxCSI {
				s.tooLong = true
			} else {
				s.csi = append(s.csi, b)
			}
		case s.inCSI && b >= 0x40 && b <= 0x7e: // the final byte
			if !s.tooLong && screenOnly(s.csi, b) {
				s.out = append(append(s.out, s.csi...), b)
			}
			s.endCSI()
		case s.inCSI:
			// Anything else ends the sequence unfinished: it is dropped
			// and the byte taken as it comes.
			s.endCSI()
			s.text(b)
		default:
			s.text(b)
		}
	}
	if _, err := s.w.Write(s.out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// text writes b, a byte of the text between sequences. Characters are
// written whole and valid UTF-8 only: the bytes of one are held until
// it is complete, and one cut short or not UTF-8 is written U+FFFD, so
// that no raw byte 0x80-0x9F reaches a terminal, whatever its decoder,
// that would read it as a C1 control.
func (s *safeWriter) text(b byte) {
	if len(s.char) > 0 {
		if b >= 0x80 && b <= 0xbf {
			s.char = append(s.char, b)
			if len(s.char) == cap(s.char) {
				s.flushChar()
			}
			return
		}
		s.flushChar() // cut short
	}
	switch n := utf8Len(b); {
	case b < 0x80:
		s.out = append(s.out, b)
	case n == 0: // a continuation byte with no character, or not UTF-8 at all
		s.out = append(s.out, "\uFFFD"...)
	default:
		s.char = append(s.charBuf[:0:n], b)
	}
}

// flushChar writes the character held, or U+FFFD when it is cut short
// or not UTF-8.
func (s *safeWriter) flushChar() {
	if len(s.char) == 0 {
		return
	}
	if len(s.char) == cap(s.char) && utf8.Valid(s.char) {
		s.out = append(s.out, s.char...)
	} else {
		s.out = append(s.out, "\uFFFD"...)
	}
	s.char = nil
}

// utf8Len is the length of the character lead byte b starts (0xC2 is
// the caller's), or 0.
func utf8Len(b byte) int {
	switch {
	case b >= 0xc3 && b <= 0xdf:
		return 2
	case b >= 0xe0 && b <= 0xef:
		return 3
	case b >= 0xf0 && b <= 0xf4:
		return 4
	}
	return 0
}

func (s *safeWriter) startCSI(intro ...byte) {
	s.inCSI, s.tooLong = true, false
	s.csi = append(s.csi[:0], intro...)
}

func (s *safeWriter) endCSI() { s.inCSI, s.tooLong, s.csi = false, false, s.csi[:0] }

// isC1String reports whether the second byte of a 0xC2 pair is a C1
// control that opens a control string (DCS, SOS, OSC, PM, APC).
func isC1String(b byte) bool {
	return b == 0x90 || b == 0x98 || b == 0x9d || b == 0x9e || b == 0x9f
}

// inputModes are the private modes (CSI ? Pm h) after which the viewer's
// terminal sends more than its keys: mouse reports (9, 1000-1006, 1015,
// 1016) and focus events (1004).
var inputModes = map[int]bool{9: true, 1000: true, 1001: true, 1002: true, 1003: true, 1004: true,
	1005: true, 1006: true, 1015: true, 1016: true}

// screenOnly reports whether the control sequence seq (introducer,
// parameter and intermediate bytes) ending in final only draws on the
// screen.
func screenOnly(seq []byte, final byte) bool {
	body := seq[2:] // after ESC [ or the two bytes of U+009B
	var prefix byte
	if len(body) > 0 && body[0] >= 0x3c && body[0] <= 0x3f { // < = > ?
		prefix = body[0]
	}
	inter := bytes.IndexFunc(body, func(r rune) bool { return r >= 0x20 && r <= 0x2f })
	switch final {
	case 'n', 'c', 't': // status and attribute reports, window operations
		return false
	case 'x':
		return inter >= 0 // DECSACE (CSI Ps * x) draws; DECREQTPARM asks the terminal
	case 'p':
		return !bytes.Contains(body, []byte("$")) // DECRQM asks the terminal
	case 'q':
		return prefix != '>' // XTVERSION asks the terminal
	case 'u':
		return prefix == 0 // plain: restore the cursor; with a prefix: keyboard protocol
	case 'm':
		return prefix == 0 // with '>' or '?': modified-key modes
	case 'h', 'l':
		if prefix == '?' {
			for _, mode := range bytes.FieldsFunc(body[1:], func(r rune) bool { return r == ';' || r == ':' }) {
				// As the terminal reads it: digits only, leading zeros
				// and all; anything else makes it not a mode to trust.
				n, err := strconv.Atoi(string(mode))
				if err != nil || inputModes[n] {
					return false
				}
			}
		}
	}
	return true
}
