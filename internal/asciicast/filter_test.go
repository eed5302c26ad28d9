package asciicast

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"
)

// What a recorded program printed to attack the viewer's terminal (its
// clipboard, title, a DCS) is dropped, whole, however the output is cut
// into writes; the escape sequences that draw the screen pass unchanged.
func TestSafeDropsControlStrings(t *testing.T) {
	in := "a\x1b[31mred\x1b[0m\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07b\x1b]0;title\x1b\\c\x1bPq#0;1\x1b\\d" +
		"\u009d52;c;eA==\u009ce\x1b_apc\x1b\\f\x1b[2J\x1b[Hé\u0085g"
	want := "a\x1b[31mred\x1b[0mbcde" + "f\x1b[2J\x1b[Hé\u0085g"
	for _, size := range []int{1, 2, 3, 5, 7, len(in)} {
		var out bytes.Buffer
		w := Safe(&out)
		for i := 0; i < len(in); i += size {
			if _, err := w.Write([]byte(in[i:min(i+size, len(in))])); err != nil {
				t.Fatal(err)
			}
		}
		if out.String() != want {
			t.Errorf("writes of %d bytes: %q, want %q", size, out.String(), want)
		}
	}
	// A string never terminated swallows the rest, not the viewer's clipboard.
	var out bytes.Buffer
	Safe(&out).Write([]byte("x\x1b]52;c;" + strings.Repeat("A", 1<<16)))
	if out.String() != "x" {
		t.Errorf("an unterminated OSC: %q", out.String()[:20])
	}
}

// The control sequences that make the viewer's terminal answer on its
// input (device status, attributes, window reports, mode and version
// requests), turn on mouse or focus reports, change how its keys are
// sent, or move the window, are dropped whole, in either form (ESC [ and
// U+009B), however the output is cut into writes; those that draw pass
// byte for byte, including the alternate screen and cursor modes set
// beside nothing else.
func TestSafeDropsControlSequencesThatReachPastTheScreen(t *testing.T) {
	drawn := "\x1b[1;31mA\x1b[0m\x1b[2J\x1b[H\x1b[10;5H\x1b[K\x1b[?1049h\x1b[?25l\x1b[?25h\x1b[3 q\x1b[s\x1b[u\x1b[2*x\x1b[!p\x1b[?1049l\x1b[1;24r" +
		"\u009b31mB\u009b0m"
	dropped := []string{
		"\x1b[6n", "\x1b[5n", "\x1b[c", "\x1b[>c", "\x1b[=c", "\x1b[21t", "\x1b[8;100;300t", "\x1b[2t", "\x1b[x",
		"\x1b[?1000h", "\x1b[?1003;1006h", "\x1b[?25;1004h", "\x1b[?9h", "\x1b[?2004$p", "\x1b[4$p", "\x1b[>0q",
		"\x1b[>1u", "\x1b[?u", "\x1b[>4;2m", "\u009b6n", "\u009b?1000h",
		"\x1b[" + strings.Repeat("1;", 40) + "m", // too long to hold: dropped whole
	}
	var in, want strings.Builder
	for i, d := range dropped {
		in.WriteString(d)
		fmt.Fprintf(&in, "%d", i)
		fmt.Fprintf(&want, "%d", i)
	}
	in.WriteString(drawn)
	want.WriteString(drawn)
	// An ESC or a character that cannot be in a control sequence ends it
	// unfinished: the sequence is dropped, what follows is not.
	in.WriteString("\x1b[12\x1b[1mC\x1b[3é\x1b[4\nD")
	want.WriteString("\x1b[1mCé\nD")
	for _, size := range []int{1, 2, 3, 5, 7, in.Len()} {
		var out bytes.Buffer
		w := Safe(&out)
		s := in.String()
		for i := 0; i < len(s); i += size {
			if _, err := w.Write([]byte(s[i:min(i+size, len(s))])); err != nil {
				t.Fatal(err)
			}
		}
		if out.String() != want.String() {
			t.Errorf("writes of %d bytes:\n got  %q\n want %q", size, out.String(), want.String())
		}
	}
}

// FuzzSafe: whatever a recording holds and however it is cut into
// writes, Safe writes the same bytes; a terminal's parser (the
// charmbracelet/x/ansi one, reading C1 controls both as UTF-8 and as raw
// bytes) finds in them no control string and no sequence Safe drops; and
// filtered again they are unchanged. ESC ESC ], ESC LF ], ESC U+009D, a
// lone 0xC2 before a write starting 0x9D and a raw 0x9D were such ways
// through.
func FuzzSafe(f *testing.F) {
	for _, s := range []string{"a\x1b]52;c;eA==\x07b", "\x1b\x1b]0;t\x07", "\x1b\n]52;c;x\x07", "\x1b\u009d52;c;x\u009c", "\x1b[6n\x1b[1;31mX",
		"\u009b?1000h\x1b[?1049h", "\x1bPq\x1b\\\x1b_a\x1b\\é", "\x1b[12\x1b[1m", "\xc2\xc2\x9d0\x07", "\x9d0;x\x07", "\xc2"} {
		f.Add([]byte(s), uint16(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, cut uint16) {
		var whole, parts, again bytes.Buffer
		Safe(&whole).Write(in)
		w := Safe(&parts)
		at := int(cut) % (len(in) + 1)
		w.Write(in[:at])
		w.Write(in[at:])
		if whole.String() != parts.String() {
			t.Fatalf("cut at %d: %q, whole: %q", at, parts.String(), whole.String())
		}
		if err := reachesPastScreen(parts.Bytes()); err != "" {
			t.Fatalf("%s in %q", err, parts.String())
		}
		Safe(&again).Write(whole.Bytes())
		if again.String() != whole.String() {
			t.Fatalf("filtered again: %q, once: %q", again.String(), whole.String())
		}
	})
}

// reachesPastScreen parses out as a terminal would and says what in it
// reaches past the screen, or "". The parser reads raw bytes 0x80-0x9F
// as C1 controls; UTF-8-encoded ones are made raw first, as terminals
// that take C1 controls in UTF-8 read them.
func reachesPastScreen(out []byte) string {
	var raw []byte
	for i := 0; i < len(out); i++ {
		if out[i] == 0xc2 && i+1 < len(out) && out[i+1] >= 0x80 && out[i+1] <= 0x9f {
			i++
		}
		raw = append(raw, out[i])
	}
	found := ""
	p := ansi.NewParser()
	say := func(what string) {
		if found == "" {
			found = what
		}
	}
	p.SetHandler(ansi.Handler{
		HandleOsc: func(int, []byte) { say("an OSC") },
		HandleDcs: func(ansi.Cmd, ansi.Params, []byte) { say("a DCS") },
		HandlePm:  func([]byte) { say("a PM") },
		HandleApc: func([]byte) { say("an APC") },
		HandleSos: func([]byte) { say("an SOS") },
		Execute: func(b byte) {
			if b == 0x9a {
				say("DECID")
			}
		},
		HandleCsi: func(cmd ansi.Cmd, params ansi.Params) {
			switch f := cmd.Final(); {
			case f == 'n' || f == 'c' || f == 't':
				say(fmt.Sprintf("CSI %c", f))
			case f == 'x' && cmd.Intermediate() == 0:
				say("DECREQTPARM")
			case f == 'p' && cmd.Intermediate() == '$':
				say("DECRQM")
			case (f == 'u' || f == 'm' || f == 'q') && cmd.Prefix() == '>':
				say(fmt.Sprintf("CSI > %c", f))
			case (f == 'h' || f == 'l') && cmd.Prefix() == '?':
				params.ForEach(0, func(_, mode int, _ bool) {
					if inputModes[mode] {
						say(fmt.Sprintf("mode ?%d", mode))
					}
				})
			}
		},
	})
	for _, b := range raw {
		p.Advance(b)
	}
	return found
}
