// Package buildinfo says which build a byoc program is: its version,
// commit and build date, which `make build` sets with -ldflags -X (see
// the Makefile's LDFLAGS), falling back to what the Go toolchain stamped
// into the binary (the VCS revision and commit time of a build in a git
// checkout) and then to "dev". imsd, agentd and byoc print it for
// --version; agentd reports Version to imsd.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set at link time: go build -ldflags "-X
// github.com/byoc-dev/byoc/internal/buildinfo.version=v1.2.3 ...". They
// are never written at run time.
var (
	version string
	commit  string
	date    string
)

// Info is one build's identity.
type Info struct {
	Version string // "dev" when the build set none
	Commit  string // "" when unknown; "+dirty" marks uncommitted changes
	Date    string // RFC 3339, "" when unknown
	Go      string // the Go version that built it
}

// Get returns this binary's build info.
func Get() Info {
	return get(version, commit, date, debug.ReadBuildInfo)
}

func get(version, commit, date string, read func() (*debug.BuildInfo, bool)) Info {
	in := Info{Version: version, Commit: commit, Date: date, Go: runtime.Version()}
	if bi, ok := read(); ok {
		in.Go = bi.GoVersion
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if in.Commit == "" {
					in.Commit = s.Value
				}
			case "vcs.time":
				if in.Date == "" {
					in.Date = s.Value
				}
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if commit == "" && dirty && in.Commit != "" {
			in.Commit += "+dirty"
		}
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
	}
	if in.Version == "" {
		in.Version = "dev"
	}
	// Twelve hex digits name a commit as well as forty, and fit a line.
	if hash, dirty, ok := strings.Cut(in.Commit, "+"); len(hash) > 12 {
		in.Commit = hash[:12]
		if ok {
			in.Commit += "+" + dirty
		}
	}
	return in
}

// Short is the version alone, as agentd reports it to imsd: Version, or
// for a build that set none, "dev-" and the commit when it is known.
func (in Info) Short() string {
	if in.Version == "dev" && in.Commit != "" {
		return "dev-" + in.Commit
	}
	return in.Version
}

// String is the --version line of program: "byoc v1.2.3 (commit
// 0123456789ab, built 2026-11-23T23:00:00Z, go1.26.0)".
func (in Info) String(program string) string {
	s := fmt.Sprintf("%s %s (", program, in.Version)
	if in.Commit != "" {
		s += "commit " + in.Commit + ", "
	}
	if in.Date != "" {
		s += "built " + in.Date + ", "
	}
	return s + in.Go + ")"
}
