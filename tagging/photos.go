package tagging

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
		res, err := tx.ExecContext(ctx, `INSERT INTO photos (path, sha256, size, taken, width, height, added_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, p.Path, p.SHA256[:], p.Size, nullString(p.Taken), p.Width, p.Height, time.Now().Unix())
		if err != nil {
			return fmt.Errorf("recording the photo: %w", err)
		}
		if photoID, err = res.LastInsertId(); err != nil {
			return err
		}
		faceIDs, err = l.insertFaces(ctx, tx, photoID, faces)
		return err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("tagging: %w", err)
	}
	return photoID, faceIDs, nil
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
		return nil, fmt.Errorf("tagging: %w", err)
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
		var lm, desc, thumb []byte
		if f.Landmarks != nil {
			if lm, err = l.Seal("faces", "landmarks", id, EncodeLandmarks(f.Landmarks)); err != nil {
				return nil, err
			}
		}
		if f.Descriptor != nil {
			if desc, err = l.Seal("faces", "descriptor", id, EncodeDescriptor(f.Descriptor)); err != nil {
				return nil, err
			}
		}
		if f.Thumbnail != nil {
			if thumb, err = l.Seal("faces", "thumbnail", id, f.Thumbnail); err != nil {
				return nil, err
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE faces SET landmarks = ?, descriptor = ?, thumbnail = ? WHERE id = ?`,
			lm, desc, thumb, id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// PhotoByPath returns the photo recorded with exactly this path.
func (l *Library) PhotoByPath(path string) (Photo, error) {
	ps, err := l.queryPhotos(context.Background(), `SELECT `+photoColumns+` FROM photos WHERE path = ?`, path)
	if err != nil {
		return Photo{}, err
	}
	if len(ps) == 0 {
		return Photo{}, fmt.Errorf("tagging: %s: %w", path, ErrUnknownPhoto)
	}
	return ps[0], nil
}

const photoColumns = `photos.id, photos.path, photos.sha256, photos.size, photos.taken, photos.width, photos.height, photos.missing`

func (l *Library) queryPhotos(ctx context.Context, query string, args ...any) ([]Photo, error) {
	rows, err := l.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("tagging: reading photos: %w", err)
	}
	defer rows.Close()
	var out []Photo
	for rows.Next() {
		var p Photo
		var sum []byte
		var taken sql.NullString
		if err := rows.Scan(&p.ID, &p.Path, &sum, &p.Size, &taken, &p.Width, &p.Height, &p.Missing); err != nil {
			return nil, fmt.Errorf("tagging: reading photos: %w", err)
		}
		copy(p.SHA256[:], sum)
		p.Taken = taken.String
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("tagging: reading photos: %w", err)
	}
	return out, nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}
