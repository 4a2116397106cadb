//go:build unix

package keygen

import "syscall"

func syscallUmask(m int) int { return syscall.Umask(m) }
