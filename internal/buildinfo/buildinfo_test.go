package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestShort(t *testing.T) {
	for _, tc := range []struct {
		in   Info
		want string
	}{
		{Info{Version: "v1.2.3", Commit: "abc"}, "v1.2.3"},
		{Info{Version: "dev", Commit: "0123456789ab+dirty"}, "dev-0123456789ab+dirty"},
		{Info{Version: "dev"}, "dev"},
	} {
		if got := tc.in.Short(); got != tc.want {
			t.Errorf("%+v.Short() = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestGet(t *testing.T) {
	stamped := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-11-20T10:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		}}, true
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	for _, tc := range []struct {
		name                  string
		version, commit, date string
		read                  func() (*debug.BuildInfo, bool)
		want                  string
	}{
		{"ldflags win", "v1.2.3", "abc1234", "2026-11-23T23:00:00Z", stamped, "byoc v1.2.3 (commit abc1234, built 2026-11-23T23:00:00Z, go1.26.0)"},
		{"toolchain stamp", "", "", "", stamped, "byoc dev (commit 0123456789ab+dirty, built 2026-11-20T10:00:00Z, go1.26.0)"},
		{"nothing known", "", "", "", none, "byoc dev ("},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := get(tc.version, tc.commit, tc.date, tc.read).String("byoc")
			if tc.name == "nothing known" {
				if len(got) < len(tc.want) || got[:len(tc.want)] != tc.want {
					t.Errorf("got %q, want it to start with %q", got, tc.want)
				}
				return
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
