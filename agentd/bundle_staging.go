package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
)

// stagingPrefix starts the name of the folder an import unpacks a
// bundle's small files into, beside the bundle (os.MkdirTemp adds digits).
const stagingPrefix = ".byoc-bundle-"

// stagingName matches the names os.MkdirTemp gives with stagingPrefix, and
// nothing else: a cleanup removes no folder an import did not make.
var stagingName = regexp.MustCompile(`^\.byoc-bundle-[0-9]+$`)

// staging is the folder one import unpacks into. The import holds an
// flock on the folder itself for as long as it runs; the kernel drops it
// when the process dies, however it dies, so a folder nobody holds is a
// leftover of an import that was killed (removeStaleStaging).
type staging struct {
	Path string
	dir  *os.File
}

// stageImport removes what imports killed in dir left (removeStaleStaging),
// then makes this import's staging folder there.
func stageImport(dir string, out io.Writer) (*staging, error) {
	removeStaleStaging(dir, out)
	return newStaging(dir)
}

// newStaging makes the staging folder in dir and locks it. A cleanup by
// another import may lock the folder between its creation and our lock,
// or remove it before we lock it: then it is made again, under a new
// name.
func newStaging(dir string) (*staging, error) {
	for range 10 {
		path, err := os.MkdirTemp(dir, stagingPrefix)
		if err != nil {
			return nil, err
		}
		d, err := lockDir(path)
		if errors.Is(err, syscall.EWOULDBLOCK) || errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			os.Remove(path)
			return nil, err
		}
		if !samePath(d, path) {
			d.Close()
			continue
		}
		return &staging{Path: path, dir: d}, nil
	}
	return nil, fmt.Errorf("make a staging folder in %s: removed by other imports' cleanups 10 times", dir)
}

// Close removes the folder, then lets go of its lock.
func (s *staging) Close() error {
	err := os.RemoveAll(s.Path)
	s.dir.Close()
	return err
}

// lockDir opens path, a folder (never through a symlink), and takes its
// flock without waiting: syscall.EWOULDBLOCK when another process holds
// it.
func lockDir(path string) (*os.File, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	d := os.NewFile(uintptr(fd), path)
	if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		d.Close()
		return nil, &os.PathError{Op: "lock", Path: path, Err: err}
	}
	return d, nil
}

// samePath reports whether path still names the folder d opened (not a
// folder made or put there since, nor a symlink).
func samePath(d *os.File, path string) bool {
	held, err := d.Stat()
	if err != nil {
		return false
	}
	now, err := os.Lstat(path)
	return err == nil && os.SameFile(held, now)
}

// removeStaleStaging removes the staging folders in dir that imports
// killed mid-way left: folders named as newStaging names them, owned by
// this user, that no running import holds locked. It never follows a
// symlink: a symlink with such a name is left alone, and os.RemoveAll
// removes the links inside a folder, not what they point to. It prints
// each folder it removed, or could not, to out; the import goes on
// either way.
func removeStaleStaging(dir string, out io.Writer) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		fmt.Fprintf(out, "leftovers of interrupted imports: %v\n", err)
		return
	}
	for _, e := range entries {
		if !stagingName.MatchString(e.Name()) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fi, err := os.Lstat(path)
		if err != nil {
			continue
		}
		if !fi.IsDir() {
			fmt.Fprintf(out, "left %s alone: not a folder an import made (%s)\n", path, fi.Mode().Type())
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
			continue
		}
		d, err := lockDir(path)
		if err != nil {
			// Held by a running import (EWOULDBLOCK), or replaced by a
			// symlink since the listing (ELOOP): not ours to remove.
			continue
		}
		if held, err := d.Stat(); err != nil || !os.SameFile(held, fi) || !samePath(d, path) {
			d.Close()
			continue
		}
		// Locked by us, no import can take the folder now (newStaging
		// makes another if it finds it locked or gone).
		if err := os.RemoveAll(path); err != nil {
			fmt.Fprintf(out, "could not remove %s, left by an interrupted import: %v\n", path, err)
		} else {
			fmt.Fprintf(out, "removed %s, left by an interrupted import\n", path)
		}
		d.Close()
	}
}
