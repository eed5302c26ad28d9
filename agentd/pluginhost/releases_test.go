package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Releases lists the pin file's releases (not a bare checksum's pin):
// an installed one verified by the key that signed it, when it was
// pinned; one pinned but not installed with no verdict; one whose
// install a job's Fetch refused refused with the reason, until a Fetch
// of it succeeds. A Fetch that failed for another reason (the registry
// unreachable) is no refusal.
func TestPinWatcherReleases(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, PinFileName)
	at := time.Date(2026, 11, 28, 2, 0, 0, 0, time.UTC)
	sum := strings.Repeat("5d", 32)
	err := WritePins(path, PinFile{Pins: map[string]Pin{
		"greeting": {SHA256: sum, PinnedAt: at, Installed: filepath.Join(dir, "plugins", "greeting-5d", "byoc-plugin-greeting"),
			OCI: "oci:/reg/plugins/greeting@sha256:9a", Version: "0.2.0", SignedBy: "3b1f"},
		"cache": {OCI: "oci:/reg/plugins/cache@sha256:77"},
		"plain": {SHA256: strings.Repeat("ab", 32)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	w := &PinWatcher{Path: path}
	fetchErr := fmt.Errorf("%w: plugin cache 0.3.0 (sha256:77): no signature by a trusted key", ErrRefused)
	l := &Loader{PinWatcher: w, Fetch: func(ctx context.Context, typ string, p Pin) (Pin, error) {
		if fetchErr != nil {
			return Pin{}, fetchErr
		}
		return Pin{Installed: filepath.Join(dir, "byoc-plugin-"+typ)}, nil
	}}
	show := func() string {
		t.Helper()
		rs, err := w.Releases()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range rs {
			out = append(out, fmt.Sprintf("%s %s %s %q key=%s %q %v", r.Type, r.OCI, r.Version, r.Verdict, r.KeyID, r.Reason, r.At.IsZero()))
		}
		return strings.Join(out, "\n")
	}
	verified := `greeting oci:/reg/plugins/greeting@sha256:9a 0.2.0 "verified" key=3b1f "" false`
	if got, want := show(), `cache oci:/reg/plugins/cache@sha256:77  "" key= "" true`+"\n"+verified; got != want {
		t.Fatalf("before a job:\n%s\nwant\n%s", got, want)
	}
	if _, _, err := l.installed(context.Background(), "cache"); !errors.Is(err, ErrRefused) {
		t.Fatalf("installed: %v", err)
	}
	if got, want := show(), `cache oci:/reg/plugins/cache@sha256:77  "refused" key= "plugin cache 0.3.0 (sha256:77): no signature by a trusted key" false`+"\n"+verified; got != want {
		t.Fatalf("after a refusal:\n%s\nwant\n%s", got, want)
	}
	// A new watcher of the same pin file (the agent restarted) holds the
	// refusal, kept in the refusals file beside it.
	if got, err := (&PinWatcher{Path: path}).Releases(); err != nil || len(got) != 2 || got[0].Verdict != "refused" ||
		got[0].Reason != "plugin cache 0.3.0 (sha256:77): no signature by a trusted key" {
		t.Fatalf("another watcher of the file: %+v %v", got, err)
	}
	fetchErr = nil
	if _, _, err := l.installed(context.Background(), "cache"); err != nil {
		t.Fatal(err)
	}
	if got, want := show(), `cache oci:/reg/plugins/cache@sha256:77  "" key= "" true`+"\n"+verified; got != want {
		t.Fatalf("after an install:\n%s\nwant\n%s", got, want)
	}
	fetchErr = errors.New("registry 10.0.3.7:5000 is unreachable")
	if _, _, err := l.installed(context.Background(), "cache"); err == nil {
		t.Fatal("no error")
	}
	if got := show(); strings.Contains(got, "refused") {
		t.Fatalf("an unreachable registry counted as a refusal:\n%s", got)
	}
	if got, err := (&PinWatcher{Path: path}).Releases(); err != nil || len(got) != 2 || got[0].Verdict != "" {
		t.Fatalf("another watcher of the file after the install: %+v %v", got, err)
	}
}
