package tagging

import (
	"context"
	"database/sql"
	"io/fs"
	"os"
	"time"
)

// fileStamp is what re-indexing compares to skip reading a file it
// recorded before, with the file's size (photos.size): its modification
// time and, on Unix, its inode number (photos.mtime and photos.inode). The
// zero stamp is unknown (NULL in the database): the file is read and
// hashed.
//
// This is the quick check of rsync and git: a file whose size, mtime and
// inode are as recorded is taken to hold the bytes recorded, without
// reading it. The inode catches a file replaced by a rename (an editor's
// atomic save, photos renamed in a cycle, which keep their mtimes and
// often their sizes); the mtime catches a file rewritten in place; the
// size, a rewrite that kept the mtime. What it cannot see is a rewrite in
// place of the same size with the mtime set back (touch -r, exiftool -P):
// IndexOptions.Rehash (veil library add --rehash) reads every file again.
type fileStamp struct {
	mtime int64  // modification time, ns since the Unix epoch
	inode uint64 // inode number (0 where the system has none)
}

func (s fileStamp) known() bool { return s.mtime != 0 }

// racyWindow: a file modified less than this long before it is read gets
// no stamp, so the next run reads it again. File systems keep modification
// times to a granule (FAT 2 s, HFS+ 1 s, ext4 a clock tick of a few ms),
// so a file changed again within the granule of its recorded mtime, after
// it was read, would keep that mtime and size and be skipped with stale
// content (git calls such entries "racily clean"). Reading at least one
// granule after the mtime rules that out: any later write gets a later
// mtime. 2 s covers FAT, the coarsest common file system; photos are
// rarely read within 2 s of being written, and those are only read once
// more.
const racyWindow = 2 * time.Second

// stampOf is the stamp of a file whose information was taken at now
// (before its bytes are read): zero if it was modified within racyWindow
// of now or in the future.
func stampOf(fi fs.FileInfo, now time.Time) fileStamp {
	mt := fi.ModTime()
	if mt.IsZero() || mt.UnixNano() == 0 || now.Sub(mt) < racyWindow {
		return fileStamp{}
	}
	return fileStamp{mtime: mt.UnixNano(), inode: inodeOf(fi)}
}

// recorded is a photo's path, content and stamp as the library holds them
// when indexing starts, for the quick check.
type recorded struct {
	sum   [32]byte
	size  int64
	stamp fileStamp
}

// recordedStamps returns the recorded photos with a known stamp, by path.
func (l *Library) recordedStamps(ctx context.Context) (map[string]recorded, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT id, path, digest, size, mtime, inode FROM photos WHERE mtime IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]recorded{}
	for rows.Next() {
		var id int64
		var path string
		var sum []byte
		var r recorded
		var mtime int64
		var inode sql.NullInt64
		if err := rows.Scan(&id, &path, &sum, &r.size, &mtime, &inode); err != nil {
			return nil, err
		}
		if r.sum, err = l.photoDigest(id, sum); err != nil {
			return nil, err
		}
		r.stamp = fileStamp{mtime: mtime, inode: uint64(inode.Int64)}
		out[path] = r
	}
	return out, rows.Err()
}

// unchangedFile reports whether the file at path still has the recorded
// size and stamp (the quick check: nothing is read).
func unchangedFile(path string, r recorded) bool {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != r.size {
		return false
	}
	return stampOf(fi, time.Now()) == r.stamp
}

// stampArgs are a stamp's column values (NULLs for the zero stamp).
func stampArgs(s fileStamp) (mtime, inode any) {
	if !s.known() {
		return nil, nil
	}
	// SQLite integers are signed: the inode's bits are stored as they are.
	return s.mtime, int64(s.inode)
}

// setStampTx records photo id's stamp (NULLs for the zero stamp).
func setStampTx(ctx context.Context, e execer, id int64, s fileStamp) error {
	mtime, inode := stampArgs(s)
	_, err := e.ExecContext(ctx, `UPDATE photos SET mtime = ?, inode = ? WHERE id = ?`, mtime, inode, id)
	return err
}
