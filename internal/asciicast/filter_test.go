package asciicast

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
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
