package agent

import (
	"context"
	"crypto/ed25519"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
)

// Every change of the customer's plugin pins that the agent reads is in
// its journal: the pins it starts with, a pin, a re-pin (with the
// previous checksum) and an unpin (issue 29).
func TestPinChangesAreJournalled(t *testing.T) {
	dir := t.TempDir()
	key, _ := identity.NewKey()
	imsKey, _ := identity.NewKey()
	if err := identity.Save(dir, identity.Identity{AgentID: "agt_1", InstallID: "ins_1", IMSURL: "http://127.0.0.1:1", PrivateKey: key,
		IMSDKeys: []ed25519.PublicKey{imsKey.Public().(ed25519.PublicKey)}}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, pluginhost.PinFileName)
	a1, b1 := strings.Repeat("a1", 32), strings.Repeat("b2", 32)
	write := func(pins map[string]pluginhost.Pin) {
		t.Helper()
		if err := pluginhost.WritePins(path, pluginhost.PinFile{Pins: pins}); err != nil {
			t.Fatal(err)
		}
	}
	write(map[string]pluginhost.Pin{"kvfile": {SHA256: a1, PinnedBy: "alice"}})
	w := &pluginhost.PinWatcher{Path: path}
	a, err := New(context.Background(), Config{IMSURL: "http://127.0.0.1:1", StateDir: dir, Runner: &runRecorder{},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PinWatcher: w})
	if err != nil {
		t.Fatal(err)
	}
	defer a.journal.Close()
	wantJournal(t, dir, KindPluginPinned, "plugin:kvfile", a1)
	write(map[string]pluginhost.Pin{"kvfile": {SHA256: b1, PinnedBy: "bob"}})
	if _, err := w.Pins(); err != nil {
		t.Fatal(err)
	}
	wantJournal(t, dir, KindPluginPinned, "plugin:kvfile", b1)
	wantJournal(t, dir, KindPluginPinned, "plugin:kvfile", "bob")
	write(map[string]pluginhost.Pin{})
	if _, err := w.Pins(); err != nil {
		t.Fatal(err)
	}
	wantJournal(t, dir, KindPluginUnpinned, "plugin:kvfile", b1)
}
