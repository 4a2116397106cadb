//go:build !unix

package tagging

import "io/fs"

// inodeOf is 0: this system's file information has no inode number, and
// the quick check compares size and modification time only.
func inodeOf(fs.FileInfo) uint64 { return 0 }
