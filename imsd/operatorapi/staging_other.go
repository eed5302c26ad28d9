//go:build !linux

package operatorapi

import "os"

// stagingFile returns a file removed from its directory at once (where
// the system allows removing an open file), so a killed imsd leaves
// nothing behind.
func stagingFile() (*os.File, error) { return unlinkedFile() }
