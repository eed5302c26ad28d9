// Package atomicfile writes files so that a crash leaves either the old
// content or the new, never half of it: a temporary file in the same
// directory, synced, then renamed over the target, and the directory
// synced after the rename (without that, a power cut can bring back the
// old file, or none, after Write returned: the rename lives in the
// directory). byoc uses it for everything that holds a secret
// (identities, tokens, CLI config) and the customer's control files.
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
)

// fsync syncs f to stable storage. Tests replace it to see what is
// synced, and when.
var fsync = (*os.File).Sync

// SyncDir syncs directory dir, so that the entries created, renamed or
// removed in it survive a power cut.
func SyncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil // no directory sync there; NTFS journals the rename
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	err = fsync(d)
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) {
		// A file system that cannot sync a directory (some network and
		// FUSE ones) orders its metadata itself, or not at all: nothing
		// more to do here.
		err = nil
	}
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// Write replaces path with data, creating its directory (0700) if needed,
// and returns once both the data and the rename are on stable storage.
// The file gets mode perm.
func Write(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := mkdirAll(dir); err != nil {
		return err
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
		err = fsync(f)
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
	return SyncDir(dir)
}

// mkdirAll creates dir (0700) and its missing parents, syncing the
// directory each new one was created in.
func mkdirAll(dir string) error {
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return nil
	}
	var created []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || filepath.Dir(d) == d {
			break
		}
		created = append(created, d)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	for _, d := range created {
		if err := SyncDir(filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}
