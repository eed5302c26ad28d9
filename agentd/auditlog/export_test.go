package auditlog

import "os"

// SetSyncs replaces the file and directory syncs Open uses until the
// returned function restores them.
func SetSyncs(file func(*os.File) error, dir func(string) error) (restore func()) {
	f, d := fsync, syncDir
	fsync, syncDir = file, dir
	return func() { fsync, syncDir = f, d }
}
