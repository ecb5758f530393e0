//go:build !unix

package store

import "os"

// tryFlock is not implemented off Unix: torch's FileStore uses LockFileEx
// on Windows, which godist does not support.
func tryFlock(f *os.File, exclusive bool) (bool, error) {
	return false, errf(ErrNotSupported, "FileStore locking is only implemented on Unix")
}

func funlock(f *os.File) error { return nil }
