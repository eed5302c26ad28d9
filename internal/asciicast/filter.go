package asciicast

import "io"

// Safe wraps w, a terminal a recording is replayed on, so that the
// recorded program's control strings never reach it: OSC (ESC ]: set the
// clipboard with OSC 52, the window title, hyperlinks), DCS (ESC P), SOS
// (ESC X), PM (ESC ^) and APC (ESC _), each up to its terminator (BEL or
// ST, ESC \), and their one-character C1 forms (U+0090, U+0098, U+009D,
// U+009E, U+009F). Everything else, the ordinary escape sequences that
// draw the screen (colours, cursor moves, clearing), passes, so the
// replay still looks as it did. The recorded side chose those strings:
// the vendor's operator in a support session the customer watches, or
// the customer's machine in one the vendor replays; a terminal that obeys
// OSC 52 would put whatever they chose on the viewer's clipboard.
func Safe(w io.Writer) io.Writer { return &safeWriter{w: w} }

// safeWriter's state: in a control string, or just after an ESC (in a
// control string or not), carried from one Write to the next.
type safeWriter struct {
	w        io.Writer
	inString bool
	esc      bool
	// c2 is a pending 0xC2, the first byte of a two-byte character that
	// may be a C1 control.
	c2  bool
	out []byte
}

func (s *safeWriter) Write(p []byte) (int, error) {
	s.out = s.out[:0]
	for _, b := range p {
		if s.c2 {
			s.c2 = false
			if isC1String(b) {
				s.inString = true
				continue
			}
			if b == 0x9c && s.inString { // ST as a C1 control
				s.inString = false
				continue
			}
			if !s.inString {
				s.out = append(s.out, 0xc2)
			}
		}
		switch {
		case s.esc:
			s.esc = false
			switch {
			case s.inString && b == '\\':
				s.inString = false
			case s.inString:
				// Not a terminator: still inside the string.
			case b == ']' || b == 'P' || b == 'X' || b == '^' || b == '_':
				s.inString = true
			default:
				s.out = append(s.out, 0x1b, b)
			}
		case b == 0x1b:
			s.esc = true
		case b == 0xc2:
			s.c2 = true
		case s.inString:
			if b == 0x07 { // BEL ends an OSC
				s.inString = false
			}
		default:
			s.out = append(s.out, b)
		}
	}
	if _, err := s.w.Write(s.out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// isC1String reports whether the second byte of a 0xC2 pair is a C1
// control that opens a control string (DCS, SOS, OSC, PM, APC).
func isC1String(b byte) bool {
	return b == 0x90 || b == 0x98 || b == 0x9d || b == 0x9e || b == 0x9f
}
