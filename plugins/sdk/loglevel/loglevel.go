// Package loglevel reads the level of a job log line written by the SDK's
// leveled logger (sdk.NewLogger, hclog's text form: "[WARN]  name: msg
// key=value"). It imports only the standard library, so the byoc CLI and
// console filter lines by level without linking the plugin runtime.
package loglevel

import "strings"

// Levels are the levels, lowest first.
var Levels = []string{"trace", "debug", "info", "warn", "error"}

// Of returns the level of a log line, or "" for a line without one.
func Of(text string) string {
	t := strings.TrimLeft(text, " ")
	for _, l := range Levels {
		if strings.HasPrefix(t, "["+strings.ToUpper(l)+"]") {
			return l
		}
	}
	return ""
}

// Rank is the position of level in Levels, -1 for an unknown one.
func Rank(level string) int {
	for i, l := range Levels {
		if l == strings.ToLower(level) {
			return i
		}
	}
	return -1
}

// AtLeast reports whether a line is at level min or above; a line
// without a level counts as info.
func AtLeast(text, min string) bool {
	l := Of(text)
	if l == "" {
		l = "info"
	}
	return Rank(l) >= Rank(min)
}
