package registry

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Scope is one scope of the Docker token specification:
// TYPE[(CLASS)]:NAME:ACTION[,ACTION...], such as repository:web:pull.
type Scope struct {
	Type    string
	Name    string
	Actions []string
}

// String writes s in the grammar ParseScope reads.
func (s Scope) String() string {
	return s.Type + ":" + s.Name + ":" + strings.Join(s.Actions, ",")
}

// MaxScopeLen bounds a scope's length: a request is refused before any
// work is done on a longer one.
const MaxScopeLen = 512

// repoName is distribution's repository name grammar: path components of
// lowercase alphanumerics separated by one period, one or two underscores
// or any number of dashes, joined by slashes.
var repoName = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|[-]*)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|[-]*)[a-z0-9]+)*)*$`)

// ValidRepository reports whether name is a repository name the
// registry accepts (at most 255 characters).
func ValidRepository(name string) bool {
	return len(name) <= 255 && repoName.MatchString(name)
}

// knownActions are the actions imsd ever grants.
var knownActions = []string{"pull", "push"}

// ParseScope reads one scope. Only the repository type is accepted (imsd
// grants nothing else), with a valid repository name and the actions pull
// and push; the error says which part is wrong.
func ParseScope(s string) (Scope, error) {
	if len(s) > MaxScopeLen {
		return Scope{}, fmt.Errorf("scope is %d bytes, at most %d", len(s), MaxScopeLen)
	}
	first := strings.IndexByte(s, ':')
	last := strings.LastIndexByte(s, ':')
	if first < 0 || first == last {
		return Scope{}, fmt.Errorf("scope %q: want TYPE:NAME:ACTIONS", s)
	}
	typ, name, acts := s[:first], s[first+1:last], s[last+1:]
	// A resource class, repository(plugin), is not something imsd grants.
	if typ != "repository" {
		return Scope{}, fmt.Errorf("scope %q: type %q, want repository", s, typ)
	}
	if !ValidRepository(name) {
		return Scope{}, fmt.Errorf("scope %q: %q is not a repository name", s, name)
	}
	sc := Scope{Type: typ, Name: name}
	for _, a := range strings.Split(acts, ",") {
		if !slices.Contains(knownActions, a) {
			return Scope{}, fmt.Errorf("scope %q: action %q, want pull or push", s, a)
		}
		if !slices.Contains(sc.Actions, a) {
			sc.Actions = append(sc.Actions, a)
		}
	}
	slices.Sort(sc.Actions)
	return sc, nil
}

// Within reports whether every action of s on its repository is among
// those allowed for that repository by allowed.
func (s Scope) Within(allowed []Scope) bool {
	for _, a := range s.Actions {
		ok := false
		for _, g := range allowed {
			if g.Type == s.Type && g.Name == s.Name && slices.Contains(g.Actions, a) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}
