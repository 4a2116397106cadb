package tagging

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/veil-privacy/veil/face"
)

// Box is a face's box in photo pixels.
type Box = face.Box

// Source says where a face came from.
type Source string

// The face sources.
const (
	Detected Source = "detected" // found by the face detector
	Manual   Source = "manual"   // drawn by the user where the detector missed it
)

// Who assigned a face to its person (Face.AssignedBy).
const (
	// ByUser is a decision of the user's: naming, unassigning or removing a
	// face. Nothing automatic overwrites it.
	ByUser = "user"
	// ByAuto is an assignment made by the program (suggestions accepted in
	// bulk, clustering, learning). Automatic code may replace it; the user
	// always can.
	ByAuto = "auto"
)

// Face is a face of the library as Faces returns it.
type Face struct {
	ID      int64
	PhotoID int64
	// Photo is the photo's path as it was added.
	Photo  string
	Box    Box
	Score  float64
	Fit    float64
	Source Source
	// PersonID and Person are the face's person (0 and "" if none).
	PersonID int64
	Person   string
	// AssignedBy is ByUser, ByAuto or "" (never decided). ByUser with no
	// person means the user unassigned the face: automatic assignment
	// leaves it alone.
	AssignedBy string
	// Removed is set on a face the user removed as a false detection.
	Removed bool
	// Descriptor is set only when FaceFilter.Descriptors asks for it.
	Descriptor []float32
}

// FaceFilter selects faces. The zero value selects every face not removed.
type FaceFilter struct {
	// Photo keeps the faces of the photo with exactly this path.
	Photo string
	// Person keeps the faces assigned to the person of this name.
	Person string
	// Unknown keeps the faces assigned to nobody.
	Unknown bool
	// IDs keeps only these faces (nil: all).
	IDs []int64
	// Removed includes faces the user removed as false detections.
	Removed bool
	// Descriptors decrypts each face's descriptor into Face.Descriptor:
	// in the space of the adopted model version (models.go), if any.
	Descriptors bool
	// Raw, with Descriptors, gives the descriptors as computed from the
	// photo, whatever model version is adopted (training and measuring
	// models need these).
	Raw bool
	// Offset skips the first Offset faces selected, and Limit, if
	// positive, returns at most Limit faces after them: a page of a long
	// list without reading the rest (a face's later columns sit behind
	// its thumbnail in the file).
	Offset, Limit int
}

// Errors of the face and people operations, for errors.Is.
var (
	ErrUnknownFace   = errors.New("no such face in the library")
	ErrUnknownPerson = errors.New("no such person in the library")
	ErrFaceRemoved   = errors.New("the face was removed as a false face")
)

// Faces returns the faces the filter selects, ordered by id, with their
// people's names decrypted (and their descriptors, if asked).
func (l *Library) Faces(f FaceFilter) ([]Face, error) {
	ctx := context.Background()
	if f.Offset < 0 || f.Limit < 0 {
		return nil, fmt.Errorf("tagging: face filter with offset %d and limit %d: neither may be negative", f.Offset, f.Limit)
	}
	var where []string
	var args []any
	if f.Photo != "" {
		p, err := l.PhotoByPath(f.Photo)
		if err != nil {
			return nil, err
		}
		where = append(where, "faces.photo_id = ?")
		args = append(args, p.ID)
	}
	if f.Person != "" {
		p, err := l.personID(ctx, l.db, f.Person)
		if err != nil {
			return nil, err
		}
		where = append(where, "faces.person_id = ?")
		args = append(args, p)
	}
	if f.Unknown {
		where = append(where, "faces.person_id IS NULL")
	}
	if !f.Removed {
		where = append(where, "faces.removed = 0")
	}
	if f.IDs != nil {
		if len(f.IDs) == 0 {
			return nil, nil
		}
		where = append(where, "faces.id IN (SELECT value FROM json_each(?))")
		args = append(args, idsJSON(f.IDs))
	}
	q := `SELECT faces.id, faces.photo_id, photos.path, faces.x, faces.y, faces.w, faces.h,
		faces.score, faces.fit, faces.source, faces.person_id, faces.assigned_by, faces.removed, ` + l.macColumn("faces")
	if f.Descriptors {
		q += `, faces.descriptor`
		if !f.Raw {
			q += `, faces.projected`
		}
	}
	q += ` FROM faces JOIN photos ON photos.id = faces.photo_id`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY faces.id`
	if f.Limit > 0 || f.Offset > 0 {
		limit := int64(f.Limit)
		if limit == 0 {
			limit = -1 // SQLite: no limit
		}
		q += ` LIMIT ? OFFSET ?`
		args = append(args, limit, f.Offset)
	}
	rows, err := l.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("reading faces: %w", err)
	}
	defer rows.Close()
	var out []Face
	for rows.Next() {
		var fc Face
		var person sql.NullInt64
		var by sql.NullString
		var desc, proj, mac []byte
		var removed int64
		dest := []any{&fc.ID, &fc.PhotoID, &fc.Photo, &fc.Box.X, &fc.Box.Y, &fc.Box.Width, &fc.Box.Height,
			&fc.Score, &fc.Fit, &fc.Source, &person, &by, &removed, &mac}
		if f.Descriptors {
			dest = append(dest, &desc)
			if !f.Raw {
				dest = append(dest, &proj)
			}
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("reading faces: %w", err)
		}
		if l.authenticated {
			if err := l.checkRowMAC("faces", []any{fc.ID, fc.PhotoID, fc.Box.X, fc.Box.Y, fc.Box.Width, fc.Box.Height,
				fc.Score, fc.Fit, string(fc.Source), nullable(person.Int64, person.Valid), nullable(by.String, by.Valid), removed}, mac); err != nil {
				return nil, err
			}
		}
		fc.PersonID, fc.AssignedBy, fc.Removed = person.Int64, by.String, removed != 0
		switch {
		case f.Descriptors && proj != nil:
			if fc.Descriptor, err = l.sealedDescriptor(fc.ID, "projected", proj); err != nil {
				return nil, err
			}
		case f.Descriptors && desc != nil:
			if fc.Descriptor, err = l.descriptor(fc.ID, desc); err != nil {
				return nil, err
			}
		}
		out = append(out, fc)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading faces: %w", err)
	}
	rows.Close()
	names := map[int64]string{}
	for i := range out {
		id := out[i].PersonID
		if id == 0 {
			continue
		}
		name, ok := names[id]
		if !ok {
			if name, err = l.personName(ctx, l.db, id); err != nil {
				return nil, err
			}
			names[id] = name
		}
		out[i].Person = name
	}
	return out, nil
}

// Face returns one face (removed or not) by id.
func (l *Library) Face(id int64) (Face, error) {
	fs, err := l.Faces(FaceFilter{IDs: []int64{id}, Removed: true})
	if err != nil {
		return Face{}, err
	}
	if len(fs) == 0 {
		return Face{}, fmt.Errorf("face %d: %w", id, ErrUnknownFace)
	}
	return fs[0], nil
}

// descriptor unseals and decodes a face's stored descriptor.
func (l *Library) descriptor(faceID int64, sealed []byte) ([]float32, error) {
	return l.sealedDescriptor(faceID, "descriptor", sealed)
}

// sealedDescriptor unseals and decodes a descriptor column of a face.
func (l *Library) sealedDescriptor(faceID int64, column string, sealed []byte) ([]float32, error) {
	plain, err := l.Unseal("faces", column, faceID, sealed)
	if err != nil {
		return nil, err
	}
	d, err := DecodeDescriptor(plain)
	if err != nil {
		return nil, fmt.Errorf("the descriptor of face %d: %w", faceID, err)
	}
	return d, nil
}

func idsJSON(ids []int64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, id)
	}
	b.WriteByte(']')
	return b.String()
}

// faceState reads a face's removal flag, or ErrUnknownFace.
func faceState(ctx context.Context, tx *sql.Tx, id int64) (removed bool, person int64, err error) {
	var p sql.NullInt64
	err = tx.QueryRowContext(ctx, `SELECT removed, person_id FROM faces WHERE id = ?`, id).Scan(&removed, &p)
	if errors.Is(err, sql.ErrNoRows) {
		return false, 0, fmt.Errorf("face %d: %w", id, ErrUnknownFace)
	}
	return removed, p.Int64, err
}

// NameFaces assigns the faces to the person of this name, creating the
// person if new, as the user's decision: it outranks any automatic
// assignment and lifts an earlier rejection of this person for these faces.
// All faces are named or none (unknown or removed faces are an error).
func (l *Library) NameFaces(faceIDs []int64, name string) (Person, error) {
	ctx := context.Background()
	if len(faceIDs) == 0 {
		return Person{}, errors.New("no faces to name")
	}
	var pid int64
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if pid, _, err = l.ensurePerson(ctx, tx, name); err != nil {
			return err
		}
		for _, id := range faceIDs {
			removed, _, err := faceState(ctx, tx, id)
			if err != nil {
				return err
			}
			if removed {
				return fmt.Errorf("face %d: %w", id, ErrFaceRemoved)
			}
			if _, err := tx.ExecContext(ctx, `UPDATE faces SET person_id = ?, assigned_by = 'user' WHERE id = ?`, pid, id); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM rejections WHERE face_id = ? AND person_id = ?`, id, pid); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Person{}, fmt.Errorf("naming faces: %w", err)
	}
	return l.personByID(ctx, pid)
}

// errNoFaces: a batch operation was given no faces.
var errNoFaces = errors.New("no faces given")

// editFacesTx applies op to each face in tx, after checking that the face
// exists; the caller's transaction makes the batch all-or-nothing.
func editFacesTx(ctx context.Context, tx *sql.Tx, faceIDs []int64, op func(id int64) error) error {
	if len(faceIDs) == 0 {
		return errNoFaces
	}
	for _, id := range faceIDs {
		if _, _, err := faceState(ctx, tx, id); err != nil {
			return err
		}
		if err := op(id); err != nil {
			return err
		}
	}
	return nil
}

// RejectFaces records the user's "these are not NAME" for the faces: they
// are never suggested or automatically assigned to that person again, and
// those that had the person lose them (even if the user had named them).
// All faces are changed in one transaction or, on an unknown face or
// person or any failure, none is.
func (l *Library) RejectFaces(faceIDs []int64, name string) error {
	ctx := context.Background()
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		pid, err := l.personID(ctx, tx, name)
		if err != nil {
			return err
		}
		return editFacesTx(ctx, tx, faceIDs, func(id int64) error {
			if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO rejections (face_id, person_id) VALUES (?, ?)`, id, pid); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `UPDATE faces SET person_id = NULL, assigned_by = 'user' WHERE id = ? AND person_id = ?`, id, pid)
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("rejecting: %w", err)
	}
	return nil
}

// RejectFace is RejectFaces for one face.
func (l *Library) RejectFace(faceID int64, name string) error {
	return l.RejectFaces([]int64{faceID}, name)
}

// UnassignFaces takes the faces' person away as the user's decision: the
// faces become unknown and automatic assignment leaves them so
// (suggestions may still propose a person for the user to confirm). All
// faces are changed in one transaction or, on an unknown face or any
// failure, none is.
func (l *Library) UnassignFaces(faceIDs []int64) error {
	ctx := context.Background()
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		return editFacesTx(ctx, tx, faceIDs, func(id int64) error {
			_, err := tx.ExecContext(ctx, `UPDATE faces SET person_id = NULL, assigned_by = 'user' WHERE id = ?`, id)
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("unassigning: %w", err)
	}
	return nil
}

// UnassignFace is UnassignFaces for one face.
func (l *Library) UnassignFace(faceID int64) error {
	return l.UnassignFaces([]int64{faceID})
}

// RemoveFaces marks the faces as false detections (the user's decision):
// they lose their person, disappear from listings, clustering and
// suggestions, and re-indexing does not bring them back. All faces are
// changed in one transaction or, on an unknown face or any failure, none
// is.
func (l *Library) RemoveFaces(faceIDs []int64) error {
	ctx := context.Background()
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		return editFacesTx(ctx, tx, faceIDs, func(id int64) error {
			if _, err := tx.ExecContext(ctx, `UPDATE faces SET removed = 1, person_id = NULL, assigned_by = 'user' WHERE id = ?`, id); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE people SET cover_face = NULL WHERE cover_face = ?`, id); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `DELETE FROM clusters WHERE face_id = ?`, id)
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("removing: %w", err)
	}
	return nil
}

// RemoveFace is RemoveFaces for one face.
func (l *Library) RemoveFace(faceID int64) error {
	return l.RemoveFaces([]int64{faceID})
}

// Assignment is an automatic assignment of a face to a person.
type Assignment struct {
	Face, Person int64
}

// AssignAuto applies automatic assignments (suggestions accepted in bulk,
// clustering, learning) and returns how many it applied. It never
// overrides the user: a face the user named, unassigned or removed, and a
// face the user rejected for that person, are left as they are (skipped,
// not an error). It may replace an earlier automatic assignment. An unknown
// face or person is an error and nothing is applied.
func (l *Library) AssignAuto(as []Assignment) (int, error) {
	ctx := context.Background()
	n := 0
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		for _, a := range as {
			if _, _, err := faceState(ctx, tx, a.Face); err != nil {
				return err
			}
			if err := personExists(ctx, tx, a.Person); err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, `UPDATE faces SET person_id = ?, assigned_by = 'auto'
				WHERE id = ? AND removed = 0 AND (assigned_by IS NULL OR assigned_by = 'auto')
				AND NOT EXISTS (SELECT 1 FROM rejections WHERE face_id = ? AND person_id = ?)`,
				a.Person, a.Face, a.Face, a.Person)
			if err != nil {
				return err
			}
			k, err := res.RowsAffected()
			if err != nil {
				return err
			}
			n += int(k)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("assigning: %w", err)
	}
	return n, nil
}

// ClearAuto takes away the automatic assignments of the given faces (all
// faces if none are given), leaving the user's decisions alone, and returns
// how many it cleared. Re-clustering or a new metric calls it before
// assigning afresh.
func (l *Library) ClearAuto(faceIDs ...int64) (int, error) {
	ctx := context.Background()
	q := `UPDATE faces SET person_id = NULL, assigned_by = NULL WHERE assigned_by = 'auto'`
	var args []any
	if len(faceIDs) > 0 {
		q += ` AND id IN (SELECT value FROM json_each(?))`
		args = append(args, idsJSON(faceIDs))
	}
	var k int64
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, q, args...)
		if err == nil {
			k, err = res.RowsAffected()
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("clearing automatic assignments: %w", err)
	}
	return int(k), nil
}

// Rejections returns, for every face the user rejected a person for, the
// ids of the rejected people.
func (l *Library) Rejections() (map[int64][]int64, error) {
	rows, err := l.db.Query(`SELECT face_id, person_id, ` + l.macColumn("rejections") + ` FROM rejections ORDER BY face_id, person_id`)
	if err != nil {
		return nil, fmt.Errorf("reading rejections: %w", err)
	}
	defer rows.Close()
	out := map[int64][]int64{}
	for rows.Next() {
		var f, p int64
		var mac []byte
		if err := rows.Scan(&f, &p, &mac); err != nil {
			return nil, fmt.Errorf("reading rejections: %w", err)
		}
		if l.authenticated {
			if err := l.checkRowMAC("rejections", []any{f, p}, mac); err != nil {
				return nil, err
			}
		}
		out[f] = append(out[f], p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading rejections: %w", err)
	}
	return out, nil
}
