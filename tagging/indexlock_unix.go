//go:build unix

package tagging

import (
	"errors"
	"os"
	"syscall"
)

// tryLock takes an exclusive flock on f without waiting (errLocked when
// another open file holds it, in this process or another).
func tryLock(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return errLocked
	}
	return err
}

// unlock releases tryLock's lock.
func unlock(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
