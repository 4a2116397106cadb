//go:build unix

package tagging

import (
	"io/fs"
	"syscall"
)

// inodeOf is the file's inode number.
func inodeOf(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}
