//go:build unix

package dp

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive lock on path (created if missing, never
// removed: removing a lock file races with its next user), waiting for
// another holder to release it. The lock is released by unlock or by the
// holder's exit, even by SIGKILL.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
