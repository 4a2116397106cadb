package tagging

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/veil-privacy/veil/face"
)

// PhotoRecord is what the library records about a photo: it stays where it
// is; the library keeps its path, content hash, size, time taken and size in
// pixels (after EXIF orientation).
type PhotoRecord struct {
	// Path is the path as it was added.
	Path string
	// SHA256 is the hash of the file's content, which identifies the photo
	// when it moves.
	SHA256 [32]byte
	// Size is the file's size in bytes.
	Size int64
	// Taken is when the photo was taken, from EXIF ("" when unknown).
	Taken string
	// Width and Height are the photo's dimensions in pixels.
	Width, Height int

	// stamp is the file's stamp when indexing read it (zero otherwise).
	stamp fileStamp
}

// NewFace is a face to store with AddPhoto or AddFaces.
type NewFace struct {
	Box Box
	// Score is the detector's score; Fit how well the landmarks fit the
	// mean face.
	Score, Fit float64
	// Source says whether the detector found the face or the user drew it.
	Source Source
	// Landmarks are the 68 landmarks (nil: none).
	Landmarks *face.Landmarks
	// Descriptor is the face descriptor (nil: none).
	Descriptor []float32
	// Thumbnail is an encoded image of the face (nil: none).
	Thumbnail []byte
}

// Photo is a photo of the library.
type Photo struct {
	ID int64
	PhotoRecord
	// Missing is set when the file was not found at the last scan.
	Missing bool
}

// ErrUnknownPhoto: no photo with that path or id.
var ErrUnknownPhoto = errors.New("no such photo in the library")

// AddPhoto records a photo and its faces in one transaction (sealing each
// face's landmarks, descriptor and thumbnail) and returns the new ids.
func (l *Library) AddPhoto(p PhotoRecord, faces []NewFace) (photoID int64, faceIDs []int64, err error) {
	ctx := context.Background()
	err = l.inTx(ctx, func(tx *sql.Tx) error {
		photoID, faceIDs, err = l.addPhotoTx(ctx, tx, p, faces)
		return err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("updating the library: %w", err)
	}
	return photoID, faceIDs, nil
}

// addPhotoTx records a photo and its faces inside tx, and forgets any scan
// error recorded for its path (the file reads now).
func (l *Library) addPhotoTx(ctx context.Context, tx *sql.Tx, p PhotoRecord, faces []NewFace) (int64, []int64, error) {
	mtime, inode := stampArgs(p.stamp)
	res, err := tx.ExecContext(ctx, `INSERT INTO photos (path, content_mac, size, taken, width, height, added_at, mtime, inode)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, p.Path, l.keys.contentID(p.SHA256), p.Size, nullString(p.Taken), p.Width, p.Height, time.Now().Unix(), mtime, inode)
	if err != nil {
		return 0, nil, fmt.Errorf("recording the photo: %w", err)
	}
	photoID, err := res.LastInsertId()
	if err != nil {
		return 0, nil, err
	}
	if err := l.sealDigestTx(ctx, tx, photoID, p.SHA256); err != nil {
		return 0, nil, err
	}
	faceIDs, err := l.insertFaces(ctx, tx, photoID, faces)
	if err != nil {
		return 0, nil, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM scan_errors WHERE path = ?`, p.Path); err != nil {
		return 0, nil, err
	}
	return photoID, faceIDs, nil
}

// sealDigestTx stores photo id's content digest, sealed (its content_mac
// is set by the caller).
func (l *Library) sealDigestTx(ctx context.Context, tx *sql.Tx, id int64, sum [32]byte) error {
	sealed, err := l.Seal("photos", "digest", id, sum[:])
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `UPDATE photos SET digest = ? WHERE id = ?`, sealed, id)
	return err
}

// photoDigest unseals photo id's content digest.
func (l *Library) photoDigest(id int64, sealed []byte) ([32]byte, error) {
	var sum [32]byte
	b, err := l.Unseal("photos", "digest", id, sealed)
	if err != nil {
		return sum, err
	}
	if len(b) != len(sum) {
		return sum, fmt.Errorf("photos.digest of row %d: %w", id, ErrTampered)
	}
	copy(sum[:], b)
	return sum, nil
}

// AddFaces adds faces to a photo already in the library, in one transaction.
func (l *Library) AddFaces(photoID int64, faces []NewFace) ([]int64, error) {
	ctx := context.Background()
	var ids []int64
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM photos WHERE id = ?`, photoID).Scan(&one); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("photo %d: %w", photoID, ErrUnknownPhoto)
			}
			return err
		}
		var err error
		ids, err = l.insertFaces(ctx, tx, photoID, faces)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("updating the library: %w", err)
	}
	return ids, nil
}

func (l *Library) insertFaces(ctx context.Context, tx *sql.Tx, photoID int64, faces []NewFace) ([]int64, error) {
	ids := make([]int64, 0, len(faces))
	for _, f := range faces {
		if f.Source != Detected && f.Source != Manual {
			return nil, fmt.Errorf("face source %q is neither %q nor %q", f.Source, Detected, Manual)
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO faces (photo_id, x, y, w, h, score, fit, source)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, photoID, f.Box.X, f.Box.Y, f.Box.Width, f.Box.Height, f.Score, f.Fit, string(f.Source))
		if err != nil {
			return nil, fmt.Errorf("recording a face: %w", err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return nil, err
		}
		if err := l.sealFaceTx(ctx, tx, id, f); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// sealFaceTx writes face id's sealed columns (landmarks, descriptor,
// thumbnail) from f, each bound to the row.
func (l *Library) sealFaceTx(ctx context.Context, tx *sql.Tx, id int64, f NewFace) error {
	var lm, desc, proj, thumb []byte
	var err error
	if f.Landmarks != nil {
		if lm, err = l.Seal("faces", "landmarks", id, EncodeLandmarks(f.Landmarks)); err != nil {
			return err
		}
	}
	if f.Descriptor != nil {
		if desc, err = l.Seal("faces", "descriptor", id, EncodeDescriptor(f.Descriptor)); err != nil {
			return err
		}
		// Under an adopted model version, the new face is projected too.
		m, err := l.activeModelTx(ctx, tx)
		if err != nil {
			return err
		}
		if m != nil {
			if proj, err = l.sealProjected(m, id, f.Descriptor); err != nil {
				return err
			}
		}
	}
	if f.Thumbnail != nil {
		if thumb, err = l.Seal("faces", "thumbnail", id, f.Thumbnail); err != nil {
			return err
		}
	}
	_, err = tx.ExecContext(ctx, `UPDATE faces SET landmarks = ?, descriptor = ?, projected = ?, thumbnail = ? WHERE id = ?`, lm, desc, proj, thumb, id)
	return err
}

// PhotoByPath returns the photo recorded with exactly this path.
func (l *Library) PhotoByPath(path string) (Photo, error) {
	ps, err := l.queryPhotos(context.Background(), `SELECT `+photoColumns+` FROM photos WHERE path = ?`, path)
	if err != nil {
		return Photo{}, err
	}
	if len(ps) == 0 {
		return Photo{}, fmt.Errorf("%s: %w", path, ErrUnknownPhoto)
	}
	return ps[0], nil
}

const photoColumns = `photos.id, photos.path, photos.digest, photos.size, photos.taken, photos.width, photos.height, photos.missing`

func (l *Library) queryPhotos(ctx context.Context, query string, args ...any) ([]Photo, error) {
	rows, err := l.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("reading photos: %w", err)
	}
	defer rows.Close()
	var out []Photo
	for rows.Next() {
		var p Photo
		var sum []byte
		var taken sql.NullString
		if err := rows.Scan(&p.ID, &p.Path, &sum, &p.Size, &taken, &p.Width, &p.Height, &p.Missing); err != nil {
			return nil, fmt.Errorf("reading photos: %w", err)
		}
		if p.SHA256, err = l.photoDigest(p.ID, sum); err != nil {
			return nil, err
		}
		p.Taken = taken.String
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading photos: %w", err)
	}
	return out, nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Photos returns every photo of the library, ordered by id.
func (l *Library) Photos() ([]Photo, error) {
	return l.queryPhotos(context.Background(), `SELECT `+photoColumns+` FROM photos ORDER BY id`)
}

// decidedFace is a stored face the user made a decision about, which
// re-indexing must keep.
type decidedFace struct {
	id  int64
	box Box
}

// replaceContentTx records new content for photo id (the file at its path
// was edited: same path, new bytes) and its newly detected faces, keeping
// the user's decisions. A face the user decided about (named, unassigned,
// removed, rejected a person for, or drew by hand) is kept with its id:
// when a new detection overlaps it (IoU at least carryIoU) the face takes
// the new box, landmarks, descriptor and thumbnail and keeps its person
// and flags; otherwise it stays as it was. Every other old face (never
// decided, or assigned automatically) is replaced by the new detections.
// It returns how many faces the photo has afterwards (removed ones
// excluded).
func (l *Library) replaceContentTx(ctx context.Context, tx *sql.Tx, id int64, p PhotoRecord, faces []NewFace) (int, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, x, y, w, h,
		(source = 'manual' OR assigned_by IS 'user' OR removed = 1 OR EXISTS (SELECT 1 FROM rejections WHERE face_id = faces.id))
		FROM faces WHERE photo_id = ? ORDER BY id`, id)
	if err != nil {
		return 0, err
	}
	var decided []decidedFace
	var undecided []int64
	for rows.Next() {
		var f decidedFace
		var keep bool
		if err := rows.Scan(&f.id, &f.box.X, &f.box.Y, &f.box.Width, &f.box.Height, &keep); err != nil {
			rows.Close()
			return 0, err
		}
		if keep {
			decided = append(decided, f)
		} else {
			undecided = append(undecided, f.id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, fid := range undecided {
		if _, err := tx.ExecContext(ctx, `UPDATE people SET cover_face = NULL WHERE cover_face = ?`, fid); err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM faces WHERE id = ?`, fid); err != nil {
			return 0, err
		}
	}
	// Greedy matching, best overlap first.
	type pair struct {
		old, new int
		iou      float64
	}
	var pairs []pair
	for i, d := range decided {
		for j := range faces {
			if v := d.box.IoU(faces[j].Box); v >= carryIoU {
				pairs = append(pairs, pair{i, j, v})
			}
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int { return cmp.Compare(b.iou, a.iou) })
	oldUsed, newUsed := make([]bool, len(decided)), make([]bool, len(faces))
	for _, pr := range pairs {
		if oldUsed[pr.old] || newUsed[pr.new] {
			continue
		}
		oldUsed[pr.old], newUsed[pr.new] = true, true
		f, fid := faces[pr.new], decided[pr.old].id
		if _, err := tx.ExecContext(ctx, `UPDATE faces SET x = ?, y = ?, w = ?, h = ?, score = ?, fit = ? WHERE id = ?`,
			f.Box.X, f.Box.Y, f.Box.Width, f.Box.Height, f.Score, f.Fit, fid); err != nil {
			return 0, err
		}
		if err := l.sealFaceTx(ctx, tx, fid, f); err != nil {
			return 0, err
		}
	}
	var fresh []NewFace
	for j, f := range faces {
		if !newUsed[j] {
			fresh = append(fresh, f)
		}
	}
	if _, err := l.insertFaces(ctx, tx, id, fresh); err != nil {
		return 0, err
	}
	mtime, inode := stampArgs(p.stamp)
	if _, err := tx.ExecContext(ctx, `UPDATE photos SET content_mac = ?, size = ?, taken = ?, width = ?, height = ?, missing = 0,
		mtime = ?, inode = ? WHERE id = ?`,
		l.keys.contentID(p.SHA256), p.Size, nullString(p.Taken), p.Width, p.Height, mtime, inode, id); err != nil {
		return 0, fmt.Errorf("recording the new content: %w", err)
	}
	if err := l.sealDigestTx(ctx, tx, id, p.SHA256); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM scan_errors WHERE path = ?`, p.Path); err != nil {
		return 0, err
	}
	var n int
	err = tx.QueryRowContext(ctx, `SELECT count(*) FROM faces WHERE photo_id = ? AND removed = 0`, id).Scan(&n)
	return n, err
}

// carryIoU is the overlap at which a new detection is taken to be the same
// face as a face the user decided about, when a photo's content changed
// (an edit or a re-export): boxes of one face from the same detector on
// the same picture overlap far more, and two different faces rarely
// overlap by half.
const carryIoU = 0.5

// errPathTaken: a known photo moved to a path the library records for
// another photo the user made decisions about.
var errPathTaken = errors.New("the library records another photo, with faces you named or edited, at this path; that photo is no longer here: remove its faces' names or move it back, then add again")

// moveTx records that photo id now lives at path (its file was moved or
// renamed: same bytes), with the stamp of the file there. A photo the
// library still records at that path has been replaced by this one's
// bytes: it is dropped if the user made no decision about its faces, else
// the move is refused with errPathTaken.
func (l *Library) moveTx(ctx context.Context, tx *sql.Tx, id int64, path string, stamp fileStamp) error {
	var other int64
	err := tx.QueryRowContext(ctx, `SELECT id FROM photos WHERE path = ? AND id != ?`, path, id).Scan(&other)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return err
	default:
		decided, err := hasDecisions(ctx, tx, other)
		if err != nil {
			return err
		}
		if decided {
			return errPathTaken
		}
		if err := deletePhotosTx(ctx, tx, `id = ?`, other); err != nil {
			return err
		}
	}
	mtime, inode := stampArgs(stamp)
	if _, err := tx.ExecContext(ctx, `UPDATE photos SET path = ?, missing = 0, mtime = ?, inode = ? WHERE id = ?`, path, mtime, inode, id); err != nil {
		return fmt.Errorf("recording the move: %w", err)
	}
	_, err = tx.ExecContext(ctx, `DELETE FROM scan_errors WHERE path = ?`, path)
	return err
}

// hasDecisions reports whether the user made a decision about a face of
// photo id: named, unassigned, removed, rejected a person for, or drew it.
func hasDecisions(ctx context.Context, q querier, id int64) (bool, error) {
	var n int
	err := q.QueryRowContext(ctx, `SELECT count(*) FROM faces WHERE photo_id = ? AND
		(source = 'manual' OR assigned_by IS 'user' OR removed = 1 OR EXISTS (SELECT 1 FROM rejections WHERE face_id = faces.id))`,
		id).Scan(&n)
	return n > 0, err
}

// deletePhotosTx deletes the photos matching where (an SQL condition on
// photos) with their faces; the faces' cluster rows and rejections go with
// them (foreign keys cascade) and covers showing them are unset. People
// stay, even if they have no face left. It returns nothing but the error.
func deletePhotosTx(ctx context.Context, tx *sql.Tx, where string, args ...any) error {
	if _, err := tx.ExecContext(ctx, `UPDATE people SET cover_face = NULL WHERE cover_face IN
		(SELECT faces.id FROM faces JOIN photos ON photos.id = faces.photo_id WHERE `+where+`)`, args...); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `DELETE FROM photos WHERE `+where, args...)
	return err
}

// setMissing marks photo id missing or present.
func (l *Library) setMissing(ctx context.Context, id int64, missing bool) error {
	return l.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE photos SET missing = ? WHERE id = ?`, missing, id)
		return err
	})
}

// recordScanError remembers why the file at path could not be indexed
// (replacing an earlier reason); veil library status lists them.
func (l *Library) recordScanError(ctx context.Context, path, reason string) error {
	return l.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO scan_errors (path, error, at) VALUES (?, ?, ?)
		ON CONFLICT(path) DO UPDATE SET error = excluded.error, at = excluded.at`, path, reason, time.Now().Unix())
		return err
	})
}

// ForgetMissing deletes the photos marked missing (their files were gone
// at the last scan) with their faces, and returns how many photos and faces
// it deleted. This is the one place indexing deletes what the user
// decided: a name given to a face of a forgotten photo goes with the face,
// as do rejections and cluster rows, and a person whose cover it was gets
// none. The people stay (with fewer faces, possibly none), so their names
// are not lost and merge or rename still apply. Until ForgetMissing is
// called a missing photo keeps everything, and comes back as it was when
// its file is found again (at the same path, or by its content elsewhere).
func (l *Library) ForgetMissing(ctx context.Context) (photos, faces int, err error) {
	err = l.inTx(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM photos WHERE missing = 1`).Scan(&photos); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM faces JOIN photos ON photos.id = faces.photo_id WHERE photos.missing = 1`).Scan(&faces); err != nil {
			return err
		}
		return deletePhotosTx(ctx, tx, `missing = 1`)
	})
	if err != nil {
		return 0, 0, fmt.Errorf("forgetting missing photos: %w", err)
	}
	return photos, faces, nil
}

// Status is a summary of the library for veil library status.
type Status struct {
	SchemaVersion int `json:"schema_version"`
	// Photos counts every photo recorded, Missing those whose file was
	// gone at the last scan (kept until ForgetMissing).
	Photos  int `json:"photos"`
	Missing int `json:"missing"`
	// Faces counts faces not removed; Named those with a person (by the
	// user or automatically), NamedByUser those the user named; Manual
	// the faces the user drew; Removed the faces removed as false.
	Faces       int `json:"faces"`
	Named       int `json:"named_faces"`
	NamedByUser int `json:"named_by_user"`
	Manual      int `json:"manual_faces"`
	Removed     int `json:"removed_faces"`
	// People counts people, Hidden the hidden ones.
	People int `json:"people"`
	Hidden int `json:"hidden_people"`
	// Failed are the files the last scans could not read, with why.
	Failed []ScanError `json:"failed"`
	// MissingPaths lists the missing photos' paths.
	MissingPaths []string `json:"missing_paths"`
	// NoFacePaths lists the photos present in which no face was found (or
	// every face was removed as false): the detector may have missed one,
	// which the user can draw (AddManualFace, veil faces add).
	NoFacePaths []string `json:"no_face_paths"`
}

// ScanError is a file a scan could not index, with the reason and when.
type ScanError struct {
	Path string    `json:"path"`
	Err  string    `json:"error"`
	At   time.Time `json:"at"`
}

// Status counts the library's photos, faces and people and lists the files
// that failed, the photos missing and the photos without a face. It
// decrypts nothing.
func (l *Library) Status(ctx context.Context) (*Status, error) {
	st := &Status{Failed: []ScanError{}, MissingPaths: []string{}, NoFacePaths: []string{}}
	v, err := schemaVersion(ctx, l.db)
	if err != nil {
		return nil, fmt.Errorf("reading the library's status: %w", err)
	}
	st.SchemaVersion = v
	counts := []struct {
		dst *int
		q   string
	}{
		{&st.Photos, `SELECT count(*) FROM photos`},
		{&st.Missing, `SELECT count(*) FROM photos WHERE missing = 1`},
		{&st.Faces, `SELECT count(*) FROM faces WHERE removed = 0`},
		{&st.Named, `SELECT count(*) FROM faces WHERE removed = 0 AND person_id IS NOT NULL`},
		{&st.NamedByUser, `SELECT count(*) FROM faces WHERE removed = 0 AND person_id IS NOT NULL AND assigned_by = 'user'`},
		{&st.Manual, `SELECT count(*) FROM faces WHERE removed = 0 AND source = 'manual'`},
		{&st.Removed, `SELECT count(*) FROM faces WHERE removed = 1`},
		{&st.People, `SELECT count(*) FROM people`},
		{&st.Hidden, `SELECT count(*) FROM people WHERE hidden = 1`},
	}
	for _, c := range counts {
		if err := l.db.QueryRowContext(ctx, c.q).Scan(c.dst); err != nil {
			return nil, fmt.Errorf("reading the library's status: %w", err)
		}
	}
	rows, err := l.db.QueryContext(ctx, `SELECT path, error, at FROM scan_errors ORDER BY path`)
	if err != nil {
		return nil, fmt.Errorf("reading the library's status: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var e ScanError
		var at int64
		if err := rows.Scan(&e.Path, &e.Err, &at); err != nil {
			return nil, fmt.Errorf("reading the library's status: %w", err)
		}
		e.At = time.Unix(at, 0).UTC()
		st.Failed = append(st.Failed, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the library's status: %w", err)
	}
	rows.Close()
	missing, err := l.queryPhotos(ctx, `SELECT `+photoColumns+` FROM photos WHERE missing = 1 ORDER BY path`)
	if err != nil {
		return nil, err
	}
	for _, p := range missing {
		st.MissingPaths = append(st.MissingPaths, p.Path)
	}
	noFace, err := l.PhotosWithoutFaces(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range noFace {
		st.NoFacePaths = append(st.NoFacePaths, p.Path)
	}
	return st, nil
}

// PhotosWithoutFaces returns the photos present (not missing) that have no
// face left: none was found, none drawn by hand, or every one was removed
// as false. They are where a face the detector missed would be, sorted by
// path. It decrypts nothing.
func (l *Library) PhotosWithoutFaces(ctx context.Context) ([]Photo, error) {
	ps, err := l.queryPhotos(ctx, `SELECT `+photoColumns+` FROM photos WHERE missing = 0 AND NOT EXISTS
		(SELECT 1 FROM faces WHERE faces.photo_id = photos.id AND faces.removed = 0) ORDER BY path`)
	if err != nil {
		return nil, fmt.Errorf("listing photos without faces: %w", err)
	}
	return ps, nil
}
