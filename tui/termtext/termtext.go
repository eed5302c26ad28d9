// Package termtext makes text that jobs wrote safe to show on a terminal:
// escape sequences and other control characters are shown, not obeyed.
// The console and the command line share it, so a log line looks the
// same in both.
package termtext

import (
	"strings"
	"unicode"
)

// Clean returns s with every control character (C0 but tab, DEL, C1) and
// every invalid UTF-8 byte replaced by U+FFFD, and each tab by tab (pass
// "\t" to keep tabs). It returns s itself, without copying, when there is
// nothing to replace.
func Clean(s, tab string) string {
	clean := true
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == unicode.ReplacementChar {
			if r == '\t' && tab == "\t" {
				continue
			}
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		switch {
		case r == '\t':
			b.WriteString(tab)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			b.WriteRune(unicode.ReplacementChar)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
