// Package atomicfile replaces files atomically and durably: the new content
// goes to a temporary file in the same folder, which is fsynced, renamed
// over the target, and then the folder is fsynced. After a crash the target
// holds the old content or the new, never a mixture, and a write that
// returned survives power loss.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Write replaces the file at path with what write writes, with permissions
// perm (applied to the temporary file before anything is written to it, so
// the content is never readable more widely than perm). On error path is
// left as it was and no temporary file remains. The temporary file is
// named "."+base(path)+".tmp-" and a random suffix.
func Write(path string, perm fs.FileMode, write func(io.Writer) error) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*") // mode 0600
	if err != nil {
		return err
	}
	name := tmp.Name()
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(name)
		}
	}()
	if perm != 0o600 {
		if err := tmp.Chmod(perm); err != nil {
			return err
		}
	}
	if err := write(tmp); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("flushing %s to disk: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(name, path); err != nil {
		return err
	}
	done = true
	return SyncDir(dir)
}

// Create makes the file at path, which must not exist, with what write
// writes and permissions perm: the content goes to a temporary file in the
// same folder (as Write's), which is fsynced and then published at path
// with a hard link, and the folder is fsynced after the link. The file
// appears complete or not at all, and of processes creating it at once
// exactly one succeeds: the others get an error that is fs.ErrExist (and
// path holds the winner's content). On any error no temporary file
// remains.
func Create(path string, perm fs.FileMode, write func(io.Writer) error) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*") // mode 0600
	if err != nil {
		return err
	}
	name := tmp.Name()
	defer os.Remove(name) // the link, if made, keeps the content
	err = func() error {
		defer tmp.Close()
		if perm != 0o600 {
			if err := tmp.Chmod(perm); err != nil {
				return err
			}
		}
		if err := write(tmp); err != nil {
			return err
		}
		if err := tmp.Sync(); err != nil {
			return fmt.Errorf("flushing %s to disk: %w", path, err)
		}
		return tmp.Close()
	}()
	if err != nil {
		return err
	}
	if err := os.Link(name, path); err != nil {
		return err
	}
	if err := os.Remove(name); err != nil {
		return err
	}
	return SyncDir(dir)
}

// CreateFile makes the file at path with data, as Create does.
func CreateFile(path string, data []byte, perm fs.FileMode) error {
	return Create(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFile replaces the file at path with data, as Write does.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// SyncDir fsyncs a folder so that a rename or link into it is durable.
// Systems that cannot sync a folder (EINVAL, or no support at all) are not
// an error: the rename is then as durable as the system makes it.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("flushing folder %s to disk: %w", dir, err)
	}
	return nil
}
