//go:build !unix

package dp

import "errors"

// lockFile is not implemented on this system: ledgers are refused rather
// than updated without a lock.
func lockFile(string) (func(), error) {
	return nil, errors.New("file locking is not supported on this system")
}
