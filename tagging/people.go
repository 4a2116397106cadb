package tagging

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// Person is a person of the library.
type Person struct {
	ID   int64
	Name string
	// Faces counts the faces assigned to the person (not removed).
	Faces int
	// Hidden people are kept but left out of suggestions by default.
	Hidden bool
	// Cover is the face chosen to show the person (0: none).
	Cover int64
}

// Errors of the people operations, for errors.Is.
var (
	ErrInvalidName = errors.New("a name must be 1 to 200 characters without control characters")
	ErrNameTaken   = errors.New("another person already has this name (merge them with veil people merge)")
	ErrSamePerson  = errors.New("cannot merge a person into themselves")
	ErrNotPersons  = errors.New("the face is not assigned to this person")
)

const maxNameRunes = 200

// normaliseName returns the name as displayed (trimmed, inner whitespace
// runs made one space, Unicode NFC) and its lookup key (the same, case
// folded): "Ann  Lee", "ann lee" and "ANN LEE" are one person.
func normaliseName(name string) (display, key string, err error) {
	display = norm.NFC.String(strings.Join(strings.Fields(name), " "))
	n := 0
	for _, r := range display {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return "", "", ErrInvalidName
		}
		n++
	}
	if n == 0 || n > maxNameRunes {
		return "", "", ErrInvalidName
	}
	return display, norm.NFC.String(cases.Fold().String(display)), nil
}

// personID finds a person by name, or ErrUnknownPerson.
func (l *Library) personID(ctx context.Context, q querier, name string) (int64, error) {
	_, key, err := normaliseName(name)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", name, err)
	}
	id, found, err := personByMAC(ctx, q, l.keys.mac(key))
	if err == nil && !found {
		return 0, fmt.Errorf("%q: %w", name, ErrUnknownPerson)
	}
	return id, err
}

// personByMAC finds the person whose name index is mac.
func personByMAC(ctx context.Context, q querier, mac []byte) (id int64, found bool, err error) {
	err = q.QueryRowContext(ctx, `SELECT id FROM people WHERE name_mac = ?`, mac).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return id, err == nil, err
}

// ensurePerson finds the person of this name or creates them.
func (l *Library) ensurePerson(ctx context.Context, tx *sql.Tx, name string) (id int64, created bool, err error) {
	display, key, err := normaliseName(name)
	if err != nil {
		return 0, false, err
	}
	mac := l.keys.mac(key)
	id, found, err := personByMAC(ctx, tx, mac)
	if err != nil || found {
		return id, false, err
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO people (name, name_mac) VALUES (X'', ?)`, mac)
	if err != nil {
		return 0, false, err
	}
	if id, err = res.LastInsertId(); err != nil {
		return 0, false, err
	}
	return id, true, l.setName(ctx, tx, id, display)
}

func (l *Library) setName(ctx context.Context, tx *sql.Tx, id int64, display string) error {
	sealed, err := l.Seal("people", "name", id, []byte(display))
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `UPDATE people SET name = ? WHERE id = ?`, sealed, id)
	return err
}

func (l *Library) personName(ctx context.Context, q querier, id int64) (string, error) {
	var sealed []byte
	if err := q.QueryRowContext(ctx, `SELECT name FROM people WHERE id = ?`, id).Scan(&sealed); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return "", fmt.Errorf("person %d: %w", id, ErrUnknownPerson)
		}
		return "", fmt.Errorf("reading a name: %w", err)
	}
	b, err := l.Unseal("people", "name", id, sealed)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// peopleQuery reads people with their face counts; the cover counts only
// while that face is still the person's.
// It reads the authenticated columns and the MAC too, to check the row.
func (l *Library) peopleQuery() string {
	return `SELECT people.id, people.name, people.hidden,
	(SELECT COUNT(*) FROM faces WHERE faces.person_id = people.id AND faces.removed = 0),
	(SELECT faces.id FROM faces WHERE faces.id = people.cover_face AND faces.person_id = people.id AND faces.removed = 0),
	people.name_mac, people.cover_face, ` + l.macColumn("people") + `
	FROM people`
}

func (l *Library) scanPeople(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, where string, args ...any) ([]Person, error) {
	rows, err := q.QueryContext(ctx, l.peopleQuery()+where, args...)
	if err != nil {
		return nil, fmt.Errorf("reading people: %w", err)
	}
	defer rows.Close()
	var out []Person
	var sealed [][]byte
	for rows.Next() {
		var p Person
		var s, nameMAC, mac []byte
		var cover, rawCover sql.NullInt64
		var hidden int64
		if err := rows.Scan(&p.ID, &s, &hidden, &p.Faces, &cover, &nameMAC, &rawCover, &mac); err != nil {
			return nil, fmt.Errorf("reading people: %w", err)
		}
		if l.authenticated {
			if err := l.checkRowMAC("people", []any{p.ID, nameMAC, hidden, nullable(rawCover.Int64, rawCover.Valid)}, mac); err != nil {
				return nil, err
			}
		}
		p.Hidden = hidden != 0
		p.Cover = cover.Int64
		out = append(out, p)
		sealed = append(sealed, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading people: %w", err)
	}
	for i := range out {
		b, err := l.Unseal("people", "name", out[i].ID, sealed[i])
		if err != nil {
			return nil, err
		}
		out[i].Name = string(b)
	}
	return out, nil
}

// People returns every person (hidden ones too), ordered by name.
func (l *Library) People() ([]Person, error) {
	ps, err := l.scanPeople(context.Background(), l.db, "")
	if err != nil {
		return nil, err
	}
	fold := cases.Fold()
	sort.SliceStable(ps, func(i, j int) bool {
		a, b := fold.String(ps[i].Name), fold.String(ps[j].Name)
		if a != b {
			return a < b
		}
		return ps[i].ID < ps[j].ID
	})
	return ps, nil
}

// PersonByName returns the person of this name (compared ignoring case and
// extra spaces), or ErrUnknownPerson.
func (l *Library) PersonByName(name string) (Person, error) {
	ctx := context.Background()
	id, err := l.personID(ctx, l.db, name)
	if err != nil {
		return Person{}, err
	}
	return l.personByID(ctx, id)
}

func (l *Library) personByID(ctx context.Context, id int64) (Person, error) {
	ps, err := l.scanPeople(ctx, l.db, " WHERE people.id = ?", id)
	if err != nil {
		return Person{}, err
	}
	if len(ps) == 0 {
		return Person{}, fmt.Errorf("person %d: %w", id, ErrUnknownPerson)
	}
	return ps[0], nil
}

// personExists returns ErrUnknownPerson if no person has this id.
func personExists(ctx context.Context, q querier, id int64) error {
	var one int64
	err := q.QueryRowContext(ctx, `SELECT id FROM people WHERE id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("person %d: %w", id, ErrUnknownPerson)
	}
	return err
}

// CreatePerson adds a person without faces; it is an error if the name is
// taken.
func (l *Library) CreatePerson(name string) (Person, error) {
	ctx := context.Background()
	var id int64
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		var created bool
		var err error
		if id, created, err = l.ensurePerson(ctx, tx, name); err != nil {
			return err
		}
		if !created {
			return fmt.Errorf("%q: %w", name, ErrNameTaken)
		}
		return nil
	})
	if err != nil {
		return Person{}, err
	}
	return l.personByID(ctx, id)
}

// RenamePerson gives a person a new name. The new name may differ from the
// old only in case or spacing; otherwise it must not belong to another
// person (ErrNameTaken: merge them instead).
func (l *Library) RenamePerson(old, new string) error {
	ctx := context.Background()
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		id, err := l.personID(ctx, tx, old)
		if err != nil {
			return err
		}
		display, key, err := normaliseName(new)
		if err != nil {
			return err
		}
		mac := l.keys.mac(key)
		other, found, err := personByMAC(ctx, tx, mac)
		if err != nil {
			return err
		}
		if found && other != id {
			return fmt.Errorf("%q: %w", new, ErrNameTaken)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE people SET name_mac = ? WHERE id = ?`, mac, id); err != nil {
			return err
		}
		return l.setName(ctx, tx, id, display)
	})
	if err != nil {
		return fmt.Errorf("renaming: %w", err)
	}
	return nil
}

// MergePeople merges person from into person into (the user's statement
// that they are one person): from's faces, rejections and cover (if into has
// none) move to into, and from is deleted. Faces assigned to from stay
// assigned by whoever assigned them, except that where the two people's
// decisions conflict the merge resolves them: a face the user named from
// but rejected for into is into's (the rejection is dropped); a face
// assigned to from automatically but rejected for into becomes unknown.
func (l *Library) MergePeople(from, into string) error {
	ctx := context.Background()
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		f, err := l.personID(ctx, tx, from)
		if err != nil {
			return err
		}
		t, err := l.personID(ctx, tx, into)
		if err != nil {
			return err
		}
		if f == t {
			return ErrSamePerson
		}
		stmts := []string{
			// A user-named face of from rejected for into: the merge says it is into's.
			`DELETE FROM rejections WHERE person_id = ?2 AND face_id IN
				(SELECT id FROM faces WHERE person_id = ?1 AND assigned_by = 'user')`,
			// An automatic assignment to from that the user rejected for into: unknown.
			`UPDATE faces SET person_id = NULL, assigned_by = NULL WHERE person_id = ?1 AND assigned_by = 'auto'
				AND id IN (SELECT face_id FROM rejections WHERE person_id = ?2)`,
			`UPDATE faces SET person_id = ?2 WHERE person_id = ?1`,
			`INSERT OR IGNORE INTO rejections (face_id, person_id) SELECT face_id, ?2 FROM rejections WHERE person_id = ?1`,
			`DELETE FROM rejections WHERE person_id = ?1`,
			`UPDATE people SET cover_face = (SELECT cover_face FROM people WHERE id = ?1)
				WHERE id = ?2 AND (cover_face IS NULL OR cover_face NOT IN
					(SELECT id FROM faces WHERE person_id = ?2 AND removed = 0))`,
			`DELETE FROM people WHERE id = ?1`,
		}
		for _, s := range stmts {
			if _, err := tx.ExecContext(ctx, s, f, t); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("merging: %w", err)
	}
	return nil
}

// SetHidden hides or shows a person. The lookup by name and the update
// are one transaction, so a person merged away or renamed by another
// program meanwhile is ErrUnknownPerson, never a silent no-op.
func (l *Library) SetHidden(name string, hidden bool) error {
	ctx := context.Background()
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		id, err := l.personID(ctx, tx, name)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE people SET hidden = ? WHERE id = ?`, hidden, id)
		return err
	})
	if err != nil {
		if hidden {
			return fmt.Errorf("hiding: %w", err)
		}
		return fmt.Errorf("showing: %w", err)
	}
	return nil
}

// SetCover chooses the face that shows a person; the face must be assigned
// to the person (ErrNotPersons otherwise).
func (l *Library) SetCover(name string, faceID int64) error {
	ctx := context.Background()
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		id, err := l.personID(ctx, tx, name)
		if err != nil {
			return err
		}
		removed, person, err := faceState(ctx, tx, faceID)
		if err != nil {
			return err
		}
		if removed {
			return fmt.Errorf("face %d: %w", faceID, ErrFaceRemoved)
		}
		if person != id {
			return fmt.Errorf("face %d: %w", faceID, ErrNotPersons)
		}
		_, err = tx.ExecContext(ctx, `UPDATE people SET cover_face = ? WHERE id = ?`, faceID, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("choosing the cover: %w", err)
	}
	return nil
}

// PersonPhotos returns the photos in which a face (not removed) is assigned
// to the person, ordered by path.
func (l *Library) PersonPhotos(name string) ([]Photo, error) {
	ctx := context.Background()
	id, err := l.personID(ctx, l.db, name)
	if err != nil {
		return nil, err
	}
	return l.queryPhotos(ctx, `SELECT `+photoColumns+` FROM photos WHERE photos.id IN
		(SELECT photo_id FROM faces WHERE person_id = ? AND removed = 0) ORDER BY photos.path`, id)
}
