package pluginhost

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// InstallDirName is the directory in the agent's state directory where
// "agentd plugin install" puts the plugins it installs, each in a
// directory of its own named TYPE-SHA256, the path its pin names.
const InstallDirName = "plugins"

// InstallBinary writes bin as type typ's plugin under root (the state
// directory's InstallDirName) and returns its path and hex SHA-256. The
// binary appears whole or not at all: it is written and synced in a
// temporary directory that is then renamed into place; one already
// installed with the same content is kept.
func InstallBinary(root, typ string, bin []byte) (path, sum string, err error) {
	if !typeName.MatchString(typ) {
		return "", "", fmt.Errorf("type %q: use lowercase letters, digits, _ and -", typ)
	}
	h := sha256.Sum256(bin)
	sum = hex.EncodeToString(h[:])
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", "", fmt.Errorf("plugin install dir: %w", err)
	}
	final := filepath.Join(root, typ+"-"+sum)
	path = filepath.Join(final, BinaryPrefix+typ)
	if b, err := os.ReadFile(path); err == nil && sha256.Sum256(b) == h {
		return path, sum, nil
	}
	tmp, err := os.MkdirTemp(root, ".install-"+typ+"-")
	if err != nil {
		return "", "", fmt.Errorf("plugin install dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", "", err
	}
	if err := writeSynced(filepath.Join(tmp, BinaryPrefix+typ), bin, 0o755); err != nil {
		return "", "", fmt.Errorf("install plugin %s: %w", typ, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		// There is a directory already: another install of the same
		// content got there first, or something else is there (a hand
		// edit), which is replaced.
		if b, rerr := os.ReadFile(path); rerr == nil && sha256.Sum256(b) == h {
			return path, sum, nil
		}
		if err := os.RemoveAll(final); err != nil {
			return "", "", fmt.Errorf("install plugin %s: %w", typ, err)
		}
		if err := os.Rename(tmp, final); err != nil {
			return "", "", fmt.Errorf("install plugin %s: %w", typ, err)
		}
	}
	if err := syncDir(root); err != nil {
		return "", "", fmt.Errorf("install plugin %s: %w", typ, err)
	}
	return path, sum, nil
}

func writeSynced(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// PruneInstalled removes the installed versions of typ under root other
// than the one whose binary is keep. A plugin already running from a
// removed file is not disturbed.
func PruneInstalled(root, typ, keep string) error {
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), typ+"-")
		dir := filepath.Join(root, e.Name())
		if ok && e.IsDir() && sha256Hex.MatchString(rest) && dir != filepath.Dir(keep) {
			errs = append(errs, os.RemoveAll(dir))
		}
	}
	return errors.Join(errs...)
}
