package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/server"
)

// --agentwire takes on or off, and nothing else.
func TestAgentWireFlag(t *testing.T) {
	if got := run(context.Background(), []string{"--agentwire=maybe", "--data-dir", t.TempDir()}); got != 2 {
		t.Fatalf("--agentwire=maybe: exit %d, want 2", got)
	}
}

// imsd keys rotate needs exactly one of --data-dir and --signing-key, and
// a key to rotate; it then replaces the key and endorses the new one.
func TestKeysRotate(t *testing.T) {
	dir := t.TempDir()
	if got := run(context.Background(), []string{"keys", "rotate"}); got != 2 {
		t.Fatalf("no flag: exit %d, want 2", got)
	}
	if got := run(context.Background(), []string{"keys", "rotate", "--data-dir", dir}); got != 1 {
		t.Fatalf("no key to rotate: exit %d, want 1", got)
	}
	path := filepath.Join(dir, server.SigningKeyFileName)
	old, err := auth.LoadSigningKey(path, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := run(context.Background(), []string{"keys", "rotate", "--data-dir", dir}); got != 0 {
		t.Fatalf("rotate: exit %d", got)
	}
	next, err := auth.LoadSigningKey(path, false)
	if err != nil || next.ID == old.ID {
		t.Fatalf("after rotate: key %s (%v), was %s", next.ID, err, old.ID)
	}
	chain, err := auth.LoadKeyChain(path, next)
	if err != nil || len(chain) != 1 || !chain[0].Signer.Equal(old.Public) {
		t.Fatalf("chain %v, %v", chain, err)
	}
}

// imsd --help (and keys rotate --help) exit 0: asking for help is not a
// mistake (issue 33, item 17).
func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"keys", "rotate", "--help"}, {"token", "create", "--help"}} {
		if got := run(context.Background(), args); got != 0 {
			t.Errorf("imsd %v: exit %d, want 0", args, got)
		}
	}
	if got := run(context.Background(), []string{"--bogus"}); got != 2 {
		t.Errorf("imsd --bogus: exit %d, want 2", got)
	}
}

// --memory-limit takes auto, off or a size as GOMEMLIMIT does; anything
// else is refused before imsd starts.
func TestMemoryLimitFlagRefusesNonsense(t *testing.T) {
	for _, v := range []string{"3GB", "lots", "0", "1.5GiB"} {
		if got := run(context.Background(), []string{"--memory-limit", v, "--data-dir", t.TempDir()}); got != 2 {
			t.Errorf("--memory-limit %s: exit %d, want 2", v, got)
		}
	}
}
