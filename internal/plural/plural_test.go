package plural

import "testing"

func TestCount(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{{0, "0 installs"}, {1, "1 install"}, {2, "2 installs"}, {-1, "-1 installs"}} {
		if got := Count(c.n, "install"); got != c.want {
			t.Errorf("Count(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}
