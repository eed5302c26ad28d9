// Package atomicfile writes files so that a crash leaves either the old
// content or the new, never half of it: a temporary file in the same
// directory, synced, then renamed over the target. byoc uses it for
// everything that holds a secret (identities, tokens, CLI config).
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write replaces path with data, creating its directory (0700) if needed.
// The file gets mode perm.
func Write(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // fails harmlessly after a successful rename
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
