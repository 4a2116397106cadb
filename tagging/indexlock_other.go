//go:build !unix

package tagging

import "os"

// tryLock does not lock where flock is missing: two runs of indexing at
// once are then not kept apart (each photo is still recorded once).
func tryLock(*os.File) error { return nil }

func unlock(*os.File) {}
