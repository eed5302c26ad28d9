package registry

import (
	"strings"
	"testing"
)

func TestParseScope(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "repository:web:pull", want: "repository:web:pull"},
		{in: "repository:acme/web-app:push,pull,pull", want: "repository:acme/web-app:pull,push"},
		{in: "repository:a__b/c.d:pull", want: "repository:a__b/c.d:pull"},
		{in: "repository:Web:pull", err: `"Web" is not a repository name`},
		{in: "repository:web:delete", err: `action "delete"`},
		{in: "repository:web:*", err: `action "*"`},
		{in: "repository(plugin):web:pull", err: `type "repository(plugin)"`},
		{in: "registry:catalog:*", err: `type "registry"`},
		{in: "repository:web", err: "want TYPE:NAME:ACTIONS"},
		{in: "repository:localhost:5000/web:pull", err: "is not a repository name"},
		{in: "repository:" + strings.Repeat("a", 600) + ":pull", err: "at most 512"},
	} {
		t.Run(tc.in[:min(len(tc.in), 40)], func(t *testing.T) {
			s, err := ParseScope(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseScope(%q) = %v, %v; want error containing %q", tc.in, s, err, tc.err)
				}
				return
			}
			if err != nil || s.String() != tc.want {
				t.Fatalf("ParseScope(%q) = %q, %v; want %q", tc.in, s, err, tc.want)
			}
		})
	}
}

func TestScopeWithin(t *testing.T) {
	grant := []Scope{{Type: "repository", Name: "web", Actions: []string{"pull"}}}
	for in, want := range map[string]bool{
		"repository:web:pull":      true,
		"repository:web:push":      false,
		"repository:web:pull,push": false,
		"repository:db:pull":       false,
	} {
		s, err := ParseScope(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Within(grant); got != want {
			t.Errorf("%s within %v = %v, want %v", in, grant, got, want)
		}
	}
}

// FuzzParseScope: a scope that parses writes back to one that parses to
// the same scope, and never holds a name the registry would refuse.
func FuzzParseScope(f *testing.F) {
	for _, s := range []string{"repository:web:pull", "repository:a/b:pull,push", "repository::pull", "a:b:c:d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseScope(in)
		if err != nil {
			return
		}
		if !ValidRepository(s.Name) || len(s.Actions) == 0 {
			t.Fatalf("ParseScope(%q) accepted %+v", in, s)
		}
		again, err := ParseScope(s.String())
		if err != nil || again.String() != s.String() {
			t.Fatalf("round trip of %q: %q, %v", s.String(), again.String(), err)
		}
	})
}
