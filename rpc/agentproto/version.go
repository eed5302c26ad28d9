package agentproto

import (
	"fmt"
	"strconv"
	"strings"
)

// The version-skew window: the agent versions an imsd version serves. An
// imsd vMAJOR.MINOR.PATCH serves agents of the same major version and of
// its minor version or up to SkewMinors minor versions older; a newer
// agent, or one of another major version, is refused (update agentd, or
// imsd first). Builds without a release version (dev, a commit) on either
// side are not checked.

// SkewMinors is how many minor versions older than imsd an agent may be.
const SkewMinors = 2

// VersionRefusalHeader is the end-of-stream metadata of a hello refused
// for the agent's version: the window imsd serves.
const VersionRefusalHeader = "Byoc-Version-Window"

// parseVersion reads vMAJOR.MINOR.PATCH (a pre-release or build suffix
// allowed); ok is false for anything else.
func parseVersion(v string) (major, minor int, ok bool) {
	v, found := strings.CutPrefix(v, "v")
	if !found {
		return 0, 0, false
	}
	v, _, _ = strings.Cut(v, "-")
	v, _, _ = strings.Cut(v, "+")
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return 0, 0, false
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil || x < 0 {
			return 0, 0, false
		}
		n[i] = x
	}
	return n[0], n[1], true
}

// AgentVersionServed reports whether an imsd of version imsd serves an
// agent of version agent, and the window it serves ("" when either is not
// a release version, which is not checked).
func AgentVersionServed(imsd, agent string) (served bool, window string) {
	maj, min, ok := parseVersion(imsd)
	if !ok {
		return true, ""
	}
	window = fmt.Sprintf(">= v%d.%d.0, < v%d.%d.0", maj, max(min-SkewMinors, 0), maj, min+1)
	amaj, amin, ok := parseVersion(agent)
	if !ok {
		return true, window
	}
	return amaj == maj && amin <= min && amin >= min-SkewMinors, window
}
