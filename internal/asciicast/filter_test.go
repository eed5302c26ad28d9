package asciicast

import (
	"bytes"
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
