//go:build !linux

package operatorapi

import "os"

// stagingFile returns a file removed from its directory at once (where
// the system allows removing an open file), so a killed imsd leaves
// nothing behind, and its release.
func stagingFile() (*os.File, func(), error) { return unlinkedFile() }
