// Package stagedir makes the folders a process unpacks a file into while
// it checks it (agentd bundle import, imsd's results import), and removes
// the ones a killed process left.
//
// Each folder is named PREFIX followed by digits (os.MkdirTemp). Its maker
// holds an flock on the folder itself for as long as it uses it; the
// kernel drops the lock when the process dies, however it dies, so a
// folder of that name nobody holds is a leftover of a process that was
// killed (RemoveStale). Processes that share the parent folder (replicas
// on one host, two imports at once) never remove each other's.
package stagedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Kind is a kind of staging folder: its name's prefix, and what makes
// such folders, for messages ("import": "left by an interrupted import").
type Kind struct {
	Prefix string
	Noun   string
}

// named reports whether name is one New gives: the prefix, then digits
// (os.MkdirTemp's), and nothing else.
func (k Kind) named(name string) bool {
	digits, ok := strings.CutPrefix(name, k.Prefix)
	return ok && digits != "" && strings.Trim(digits, "0123456789") == ""
}

// Dir is one staging folder, locked.
type Dir struct {
	Path string
	dir  *os.File
}

// Stage removes what killed processes left in parent (RemoveStale,
// reporting to report), then makes and locks a new folder there.
func (k Kind) Stage(parent string, report func(string)) (*Dir, error) {
	k.RemoveStale(parent, report)
	return k.New(parent)
}

// New makes a staging folder in parent and locks it. A cleanup by
// another process may lock the folder between its creation and our lock,
// or remove it before we lock it: then it is made again, under a new
// name.
func (k Kind) New(parent string) (*Dir, error) {
	for range 10 {
		path, err := os.MkdirTemp(parent, k.Prefix)
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
		return &Dir{Path: path, dir: d}, nil
	}
	return nil, fmt.Errorf("make a staging folder in %s: removed by other processes' cleanups 10 times", parent)
}

// Close removes the folder, then lets go of its lock.
func (s *Dir) Close() error {
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

// RemoveStale removes the staging folders in parent that killed
// processes left: folders named as New names them, owned by
// this user, that no running process holds locked. It never follows a
// symlink: a symlink with such a name is left alone, and os.RemoveAll
// removes the links inside a folder, not what they point to. It reports
// each folder it removed, or could not, to report (nil: none); the caller
// goes on either way.
func (k Kind) RemoveStale(parent string, report func(string)) {
	if report == nil {
		report = func(string) {}
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		report(fmt.Sprintf("leftovers of interrupted %ss: %v", k.Noun, err))
		return
	}
	for _, e := range entries {
		if !k.named(e.Name()) {
			continue
		}
		path := filepath.Join(parent, e.Name())
		fi, err := os.Lstat(path)
		if err != nil {
			continue
		}
		if !fi.IsDir() {
			report(fmt.Sprintf("left %s alone: not a staging folder (%s)", path, fi.Mode().Type()))
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
			continue
		}
		d, err := lockDir(path)
		if err != nil {
			// Held by a running process (EWOULDBLOCK), or replaced by
			// a symlink since the listing (ELOOP): not ours to remove.
			continue
		}
		if held, err := d.Stat(); err != nil || !os.SameFile(held, fi) || !samePath(d, path) {
			d.Close()
			continue
		}
		// Locked by us, no process can take the folder now (New makes
		// another if it finds it locked or gone).
		if err := os.RemoveAll(path); err != nil {
			report(fmt.Sprintf("could not remove %s, left by an interrupted %s: %v", path, k.Noun, err))
		} else {
			report(fmt.Sprintf("removed %s, left by an interrupted %s", path, k.Noun))
		}
		d.Close()
	}
}
