package permissions

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
)

// The control files' side of a rotation of the agent's key
// (identity.Rotation): the files are re-signed with the next key, as the
// generation they are, before identity.json holds it. While the rotation
// is under way both keys check them (Key.Next), so the order of the
// steps is crash-safe:
//
//  1. identity-next.json holds the next key (identity.BeginRotation);
//  2. imsd records it (the agent's hello, its welcome);
//  3. each control file is re-signed with it, under its lock;
//  4. identity.json is saved with it (the commit);
//  5. identity-next.json is removed.
//
// Stopped after 1, 2 or 3, the agent starts with the old key, takes the
// rotation up again and every file verifies with one of the two keys;
// after 4, with the new key (a leftover identity-next.json holding the
// key identity.json holds is removed at the next look).

// rotationStep, if set (tests), runs after each step of CommitRotation;
// an error stops it there, as a crash would.
var rotationStep func(step string) error

func step(name string) error {
	if rotationStep == nil {
		return nil
	}
	return rotationStep(name)
}

// resigner is a control file that a rotation re-signs.
type resigner interface {
	fileName() string
	resignLocked(dir string, from, to Key) (bool, error)
}

func (c controlFile[T]) fileName() string { return c.name }

// resignLocked re-signs the file with to's key at the generation it has,
// if it verifies with from (either of its keys) and is not signed with
// to's key already; it reports whether it wrote. A missing file is left
// missing; a refused one is left as it is (re-signing would launder it):
// it stays refused, as it was. The caller holds the file's lock.
func (c controlFile[T]) resignLocked(dir string, from, to Key) (bool, error) {
	path := filepath.Join(dir, c.name)
	b, err := readBounded(path)
	if err != nil || b == nil {
		return false, err
	}
	toPub := to.Private.Public().(ed25519.PublicKey)
	if _, _, err := open[T](Key{AgentID: to.AgentID, InstallID: to.InstallID, Public: toPub}, path, b, 0); err == nil {
		return false, nil
	}
	acc, err := dirAccepted(dir, c.name)
	if err != nil {
		return false, err
	}
	v, gen, err := open[T](from, path, b, acc)
	if err != nil {
		if IsRefused(err) {
			return false, nil
		}
		return false, err
	}
	return true, c.write(dir, to, gen, v)
}

// CommitRotation completes the rotation r of the agent id enrolled in dir
// (steps 3 to 5 above), once imsd has recorded the next key: it re-signs
// every control file with the next key, saves identity.json with it and
// removes the rotation file, holding every control file's lock so that
// no command signs with the old key in between. It returns the identity
// as saved and the files it re-signed.
func CommitRotation(dir string, id identity.Identity, r identity.Rotation, now time.Time) (identity.Identity, []string, error) {
	if r.PrivateKey.Equal(id.PrivateKey) {
		return id, nil, errors.New("the rotation's key is the agent's key already")
	}
	next := id.Rotated(r, now)
	from := KeyOf(id)
	from.Next = r.Public()
	to := KeyOf(next)
	var resigned []string
	files := []interface {
		resigner
		locked(string, func() error) error
	}{permissionsFile, grantsFile}
	var commit func(i int) error
	commit = func(i int) error {
		if i < len(files) {
			return files[i].locked(dir, func() error { return commit(i + 1) })
		}
		for _, f := range files {
			wrote, err := f.resignLocked(dir, from, to)
			if err != nil {
				return fmt.Errorf("re-sign %s with the next key: %w", f.fileName(), err)
			}
			if wrote {
				resigned = append(resigned, f.fileName())
			}
			if err := step("resigned " + f.fileName()); err != nil {
				return err
			}
		}
		if err := identity.Save(dir, next); err != nil {
			return fmt.Errorf("save the identity with the next key: %w", err)
		}
		if err := step("saved identity"); err != nil {
			return err
		}
		return identity.DropRotation(dir)
	}
	if err := commit(0); err != nil {
		return id, resigned, err
	}
	return next, resigned, nil
}
