package tagging

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
)

// SchemaVersion is the version of the database layout this build writes.
// Open brings an older library up to it with the migrations below, each in
// its own transaction, and refuses a newer one.
const SchemaVersion = 8

// migrations[i] brings a library from version i to version i+1. Append new
// migrations; never edit one that has shipped (libraries on users' disks
// were made by it).
//
// A migration runs with the library unlocked (k holds its keys), so it may
// re-key what an older layout stored in the clear.
var migrations = []func(ctx context.Context, tx *sql.Tx, k *subKeys) error{
	keyless(migrate1),
	keyless(migrate2),
	keyless(migrate3),
	migrate4,
	migrate5,
	migrate6, // models.go
	migrate7,
	migrate8, // federation.go
}

// keyless adapts a migration that needs no key.
func keyless(f func(tx *sql.Tx) error) func(context.Context, *sql.Tx, *subKeys) error {
	return func(_ context.Context, tx *sql.Tx, _ *subKeys) error { return f(tx) }
}

// migrate1 is the first layout: photos, faces, people and rejections.
//
// Ids are AUTOINCREMENT so a deleted face's or person's id is never reused:
// an id a script printed earlier never comes to mean another face.
func migrate1(tx *sql.Tx) error {
	return execAll(tx,
		`CREATE TABLE photos (
			id INTEGER PRIMARY KEY AUTOINCREMENT,
			path TEXT NOT NULL UNIQUE,
			sha256 BLOB NOT NULL UNIQUE,
			size INTEGER NOT NULL,
			taken TEXT NULL,
			width INTEGER NOT NULL,
			height INTEGER NOT NULL,
			added_at INTEGER NOT NULL,
			missing INTEGER NOT NULL DEFAULT 0)`,
		`CREATE TABLE people (
			id INTEGER PRIMARY KEY AUTOINCREMENT,
			name BLOB NOT NULL,
			name_mac BLOB NOT NULL UNIQUE,
			hidden INTEGER NOT NULL DEFAULT 0,
			cover_face INTEGER NULL)`,
		`CREATE TABLE faces (
			id INTEGER PRIMARY KEY AUTOINCREMENT,
			photo_id INTEGER NOT NULL REFERENCES photos(id) ON DELETE CASCADE,
			x REAL NOT NULL, y REAL NOT NULL, w REAL NOT NULL, h REAL NOT NULL,
			score REAL NOT NULL,
			fit REAL NOT NULL,
			source TEXT NOT NULL CHECK (source IN ('detected', 'manual')),
			landmarks BLOB,
			descriptor BLOB,
			thumbnail BLOB,
			person_id INTEGER NULL REFERENCES people(id),
			assigned_by TEXT NULL CHECK (assigned_by IN ('user', 'auto')),
			removed INTEGER NOT NULL DEFAULT 0)`,
		`CREATE TABLE rejections (
			face_id INTEGER NOT NULL REFERENCES faces(id) ON DELETE CASCADE,
			person_id INTEGER NOT NULL REFERENCES people(id) ON DELETE CASCADE,
			PRIMARY KEY (face_id, person_id))`,
	)
}

// migrate2 adds the tables of clustering, the learned metric and scan
// errors, and the indexes the common queries need.
func migrate2(tx *sql.Tx) error {
	return execAll(tx,
		`CREATE TABLE clusters (
			face_id INTEGER PRIMARY KEY REFERENCES faces(id) ON DELETE CASCADE,
			cluster INTEGER NOT NULL)`,
		`CREATE TABLE metric (
			id INTEGER PRIMARY KEY AUTOINCREMENT,
			blob BLOB NOT NULL,
			names INTEGER NOT NULL,
			trained_at INTEGER NOT NULL)`,
		`CREATE TABLE scan_errors (
			path TEXT PRIMARY KEY,
			error TEXT NOT NULL,
			at INTEGER NOT NULL)`,
		`CREATE INDEX faces_photo ON faces(photo_id)`,
		`CREATE INDEX faces_person ON faces(person_id)`,
		`CREATE INDEX clusters_cluster ON clusters(cluster)`,
	)
}

// migrate3 adds each photo's file stamp (modification time and inode, see
// fileStamp), so re-indexing skips reading files unchanged since. Photos
// recorded before have none (NULL): the next run reads them once more and
// records it.
func migrate3(tx *sql.Tx) error {
	return execAll(tx,
		`ALTER TABLE photos ADD COLUMN mtime INTEGER NULL`,
		`ALTER TABLE photos ADD COLUMN inode INTEGER NULL`,
	)
}

// migrate4 stops storing each photo's plain SHA-256, which let anyone with
// the file and a candidate photo test whether the library holds it: the
// column becomes content_mac, HMAC-SHA256 of the digest under the
// library's photo-content key (subKeys.contentID), and the digest itself
// is kept sealed in digest (so a rekey can recompute the id). Every photo
// is re-keyed in this one transaction: an interruption leaves version 3 as
// it was. (Open empties the journal afterwards, and secure_delete
// overwrites the replaced values, so no plain digest stays in the files.)
func migrate4(ctx context.Context, tx *sql.Tx, k *subKeys) error {
	if err := execAll(tx,
		`ALTER TABLE photos RENAME COLUMN sha256 TO content_mac`,
		`ALTER TABLE photos ADD COLUMN digest BLOB NULL`,
	); err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, `SELECT id, content_mac FROM photos ORDER BY id`)
	if err != nil {
		return err
	}
	type photo struct {
		id  int64
		sum [32]byte
	}
	var ps []photo
	for rows.Next() {
		var p photo
		var b []byte
		if err := rows.Scan(&p.id, &b); err != nil {
			rows.Close()
			return err
		}
		if len(b) != len(p.sum) {
			rows.Close()
			return fmt.Errorf("photo %d has a %d-byte content hash", p.id, len(b))
		}
		copy(p.sum[:], b)
		ps = append(ps, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, p := range ps {
		digest, err := sealWith(k.seal, p.sum[:], fieldAAD("photos", "digest", p.id))
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE photos SET content_mac = ?, digest = ? WHERE id = ?`,
			k.contentID(p.sum), digest, p.id); err != nil {
			return err
		}
	}
	return nil
}

// migrate7 replaces the faces' indexes by person and by photo with ones
// that also hold removed, and adds one that covers the counts of
// library status. A face row holds its thumbnail, and removed comes after
// it: without them, counting a person's faces or the library's named
// faces read every face's thumbnail (20.7 ms for People at 10,000 faces,
// 8.1 ms with the index; see docs/results.md). The indexes change the
// schema, so the sealed integrity state takes the new schema's digest in
// the same transaction.
func migrate7(ctx context.Context, tx *sql.Tx, k *subKeys) error {
	if err := execAll(tx,
		`DROP INDEX faces_person`,
		`DROP INDEX faces_photo`,
		`CREATE INDEX faces_person_removed ON faces(person_id, removed)`,
		`CREATE INDEX faces_photo_removed ON faces(photo_id, removed)`,
		`CREATE INDEX faces_counts ON faces(removed, person_id, assigned_by, source)`,
	); err != nil {
		return err
	}
	return resealSchema(ctx, tx, k)
}

// resealSchema records the schema's new digest in the sealed integrity
// state, in the migration's transaction, so that the changed layout is not
// taken for tampering at the next open.
func resealSchema(ctx context.Context, tx *sql.Tx, k *subKeys) error {
	st, err := readIntegrityState(ctx, tx, k)
	if err != nil {
		return err
	}
	if st.schema, err = schemaDigest(ctx, tx); err != nil {
		return err
	}
	return writeIntegrityState(ctx, tx, k, &st)
}

func execAll(tx *sql.Tx, stmts ...string) error {
	for _, s := range stmts {
		if _, err := tx.Exec(s); err != nil {
			return err
		}
	}
	return nil
}

// Meta keys.
const (
	metaSchema = "schema_version"
	metaKDF    = "kdf"
	metaDEK    = "dek"
)

func createMeta(tx *sql.Tx) error {
	_, err := tx.Exec(`CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL)`)
	return err
}

// schemaVersion reads the stored layout version.
func schemaVersion(ctx context.Context, q querier) (int, error) {
	b, err := getMeta(ctx, q, metaSchema)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(string(b))
	if err != nil || v < 0 {
		return 0, fmt.Errorf("the library's schema version %q is malformed", b)
	}
	return v, nil
}

// migrateTo runs migrations from the stored version up to target, and
// reports whether it ran any.
func migrateTo(ctx context.Context, db *sql.DB, k *subKeys, target int) (bool, error) {
	ran := false
	for {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return ran, err
		}
		v, err := schemaVersion(ctx, tx)
		if err != nil {
			tx.Rollback()
			return ran, err
		}
		if v > SchemaVersion {
			tx.Rollback()
			return ran, fmt.Errorf("the library has schema version %d, newer than this build's %d: use a newer veil", v, SchemaVersion)
		}
		if v >= target {
			return ran, tx.Rollback()
		}
		if err := migrations[v](ctx, tx, k); err != nil {
			tx.Rollback()
			return ran, fmt.Errorf("migrating the library to schema version %d: %w", v+1, err)
		}
		if err := setMeta(ctx, tx, metaSchema, []byte(strconv.Itoa(v+1))); err != nil {
			tx.Rollback()
			return ran, err
		}
		if err := tx.Commit(); err != nil {
			return ran, err
		}
		ran = true
	}
}

// querier is what both *sql.DB and *sql.Tx offer for reading.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// execer is what both *sql.DB and *sql.Tx offer for writing.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

var errNoMeta = errors.New("missing library header entry")

func getMeta(ctx context.Context, q querier, key string) ([]byte, error) {
	var b []byte
	err := q.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = ?`, key).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w %q", errNoMeta, key)
	}
	return b, err
}

func setMeta(ctx context.Context, e execer, key string, value []byte) error {
	_, err := e.ExecContext(ctx, `INSERT INTO meta (key, value) VALUES (?, ?)
		ON CONFLICT(key) DO UPDATE SET value = excluded.value`, key, value)
	return err
}
