package termtext

import "testing"

func TestClean(t *testing.T) {
	for _, tc := range []struct{ in, tab, want string }{
		{"plain text", "    ", "plain text"},
		{"a\tb", "    ", "a    b"},
		{"a\tb", "\t", "a\tb"},
		{"\x1b[31mred\x1b[0m", "\t", "\ufffd[31mred\ufffd[0m"},
		{"\x1b]0;title\x07x", "\t", "\ufffd]0;title\ufffdx"},
		{"cr\rdel\x7fc1\u009b", "\t", "cr\ufffddel\ufffdc1\ufffd"},
		{"bad \xff byte", "\t", "bad \ufffd byte"},
		{"héllo ✓", "\t", "héllo ✓"},
	} {
		if got := Clean(tc.in, tc.tab); got != tc.want {
			t.Errorf("Clean(%q, %q) = %q, want %q", tc.in, tc.tab, got, tc.want)
		}
	}
}

func FuzzClean(f *testing.F) {
	f.Add("\x1b[2J\tx\xff")
	f.Fuzz(func(t *testing.T, s string) {
		for _, r := range Clean(s, "\t") {
			if r < 0x20 && r != '\t' || r == 0x7f || r >= 0x80 && r < 0xa0 {
				t.Fatalf("Clean(%q) keeps control %U", s, r)
			}
		}
	})
}
