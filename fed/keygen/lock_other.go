//go:build !unix

package keygen

import (
	"errors"
	"os"
)

// tryLock is not implemented on this system: a key generator refuses to
// run rather than share its state with another.
func tryLock(*os.File) error { return errors.New("file locking is not supported on this system") }

func unlock(*os.File) {}
