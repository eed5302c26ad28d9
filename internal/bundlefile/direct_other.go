//go:build !linux

package bundlefile

import (
	"errors"
	"os"
)

// directOpen: direct I/O is used on Linux only; elsewhere the range is
// read through the page cache.
func directOpen(*os.File) *os.File { return nil }

func preadDirect(*os.File, []byte, int64) (int, error) { return 0, errors.ErrUnsupported }

func isInvalid(err error) bool { return errors.Is(err, errors.ErrUnsupported) }
