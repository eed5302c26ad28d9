package action

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestLineWriter(t *testing.T) {
	long := strings.Repeat("a", MaxLineBytes-1) + "é" + "tail" // é straddles the limit
	tests := []struct {
		name   string
		writes []string
		want   []string
	}{
		{"lines across writes", []string{"ab", "c\nde", "f\n\ng"}, []string{"abc", "def", "", "g"}},
		{"crlf", []string{"a\r\nb\r\n"}, []string{"a", "b"}},
		{"exactly max", []string{strings.Repeat("x", MaxLineBytes) + "\n"}, []string{strings.Repeat("x", MaxLineBytes)}},
		{"max plus one", []string{strings.Repeat("x", MaxLineBytes+1) + "\n"}, []string{strings.Repeat("x", MaxLineBytes), "x"}},
		{"rune at boundary", []string{long}, []string{strings.Repeat("a", MaxLineBytes-1), "étail"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			w := newLineWriter(func(s string) { got = append(got, s) })
			for _, s := range tt.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			w.Flush()
			if !slices.Equal(got, tt.want) {
				t.Errorf("lines = %d %q..., want %d", len(got), trunc(got), len(tt.want))
			}
			for _, l := range got {
				if !utf8.ValidString(l) || len(l) > MaxLineBytes {
					t.Errorf("bad line of %d bytes", len(l))
				}
			}
		})
	}
}

func trunc(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		if len(l) > 20 {
			l = l[:20] + "..."
		}
		out[i] = l
	}
	return out
}
