package tagging

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Rotating the data key (issue 19 item 7.3).
//
// Rekey changes only the passphrase: the data key stays, so an old copy of
// the key header with the old passphrase still unwraps it and decrypts
// everything written later. RotateKey draws a new data key and re-encrypts
// every sealed field, recomputes every keyed id (photos' content ids,
// people's name index) and every row MAC under it, then wraps it under the
// new passphrase. Afterwards the old data key opens nothing in the file.
//
// It works in batches, each one transaction, so an interruption (a crash,
// SIGKILL, power loss) loses at most the batch under way; running it again
// with the same old passphrase goes on where it stopped:
//
//  1. start: one transaction stores the new data key sealed under the old
//     one (meta "rotation_dek": only the old passphrase, which the user
//     still has, can resume) and the rotation's progress, sealed under
//     the new key (meta "rotation_state": the table and row reached and
//     the sums of the rows done, under both keys).
//  2. batches: each re-seals up to rotateBatch rows of one table and
//     advances the progress in the same transaction. A row is verified
//     under the old key before it is converted, so nothing forged is
//     re-MACed under the new one.
//  3. finish: one transaction writes the new key header and wrapped key,
//     the table sums under the new key, and deletes the rotation entries;
//     then the journal is emptied.
//
// While a rotation is pending, Open refuses the library
// (ErrRotationPending), and a program that had it open cannot commit a
// write (sealDirty refuses): the rows are under two keys. A resumed
// rotation first verifies the whole library, each row under the key its
// position says, against both keys' sums, so an edit made between the
// interruption and the resumption is refused like any other.

// ErrRotationPending: a key rotation was interrupted; RotateKey (veil
// library rekey) with the same current passphrase finishes it.
var ErrRotationPending = errors.New("a change of the library's key was interrupted: run veil library rekey again with the same current passphrase to finish it")

const (
	metaRotationDEK   = "rotation_dek"
	metaRotationState = "rotation_state"
	// rotateBatch is how many rows one transaction of RotateKey converts:
	// small enough that an interruption loses little, large enough that
	// the commits cost little beside the re-sealing.
	rotateBatch = 256
)

// sealedColumns are the sealed columns of each table, which RotateKey
// re-encrypts.
var sealedColumns = map[string][]string{
	"photos": {"digest"},
	"faces":  {"landmarks", "descriptor", "thumbnail", "projected"},
	"people": {"name"},
	"metric": {"blob"},
}

// RotateProgress reports a rotation's progress: rows converted of all.
type RotateProgress func(done, total int64)

// rotationState is the progress of a rotation.
type rotationState struct {
	// table is the index in authTables of the table being converted
	// (len(authTables) when all are), row the last rowid converted in it.
	table int
	row   int64
	// oldDone and newDone are the sums, under the old and the new key, of
	// the rows converted so far.
	oldDone, newDone integrityState
}

func (r *rotationState) encode() []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(r.table))
	b = binary.LittleEndian.AppendUint64(b, uint64(r.row))
	b = append(b, r.oldDone.encode()...)
	return append(b, r.newDone.encode()...)
}

func decodeRotationState(b []byte) (rotationState, error) {
	var r rotationState
	if len(b) < 12 || (len(b)-12)%2 != 0 {
		return r, errors.New("malformed rotation state")
	}
	r.table = int(binary.LittleEndian.Uint32(b))
	r.row = int64(binary.LittleEndian.Uint64(b[4:]))
	half := (len(b) - 12) / 2
	var err error
	if r.oldDone, err = decodeIntegrityState(b[12 : 12+half]); err != nil {
		return r, err
	}
	if r.newDone, err = decodeIntegrityState(b[12+half:]); err != nil {
		return r, err
	}
	if r.table < 0 || r.table > len(authTables) {
		return r, errors.New("malformed rotation state")
	}
	return r, nil
}

var (
	rotationDEKAAD   = fieldAAD("meta", metaRotationDEK, 0)
	rotationStateAAD = fieldAAD("meta", metaRotationState, 0)
)

func writeRotationState(ctx context.Context, e execer, k *subKeys, r *rotationState) error {
	sealed, err := sealWith(k.seal, r.encode(), rotationStateAAD)
	if err != nil {
		return err
	}
	return setMeta(ctx, e, metaRotationState, sealed)
}

func readRotationState(ctx context.Context, q querier, k *subKeys) (rotationState, error) {
	sealed, err := getMeta(ctx, q, metaRotationState)
	if err != nil {
		return rotationState{}, fmt.Errorf("%w: the key rotation's progress is missing", ErrModified)
	}
	plain, err := openWith(k.seal, sealed, rotationStateAAD)
	if err != nil {
		return rotationState{}, fmt.Errorf("%w: the key rotation's progress fails authentication", ErrModified)
	}
	r, err := decodeRotationState(plain)
	if err != nil {
		return rotationState{}, fmt.Errorf("%w: %v", ErrModified, err)
	}
	return r, nil
}

// rotationPending reports whether a rotation was started and not finished.
func rotationPending(ctx context.Context, q querier) (bool, error) {
	_, err := getMeta(ctx, q, metaRotationDEK)
	if errors.Is(err, errNoMeta) {
		return false, nil
	}
	return err == nil, err
}

// RotateKey replaces the data key of the library in dir, unlocked with
// old, by a new random one wrapped under the passphrase newPassphrase
// returns (with opt's KDF parameters, which CreateOptions' rules check like
// Create's), re-encrypting every sealed field and re-MACing every row; see
// the comment at the top of rotate.go. newPassphrase is called once old
// has unlocked the library, so a prompt for the new passphrase comes
// after the current one is checked, and Argon2id runs once for each. If a
// rotation was interrupted, RotateKey finishes that one (old is then still
// the passphrase the rotation started from). progress, when not nil, is
// called after each batch.
func RotateKey(ctx context.Context, dir string, old []byte, newPassphrase func() ([]byte, error), opt CreateOptions, progress RotateProgress) error {
	return rotateKey(ctx, dir, old, newPassphrase, opt, progress, deriveKEK)
}

func rotateKey(ctx context.Context, dir string, old []byte, newPassphrase func() ([]byte, error), opt CreateOptions, progress RotateProgress, derive kdfFunc) error {
	if _, err := opt.kdf(); err != nil {
		return err
	}
	path := filepath.Join(dir, DBFile)
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: %w", dir, ErrNoLibrary)
		}
		return err
	}
	db, err := openDB(path)
	if err != nil {
		return err
	}
	defer db.Close()
	dek, _, err := unwrapDEK(ctx, db, old, derive)
	if err != nil {
		return err
	}
	defer clear(dek)
	oldKeys, err := deriveSubKeys(dek)
	if err != nil {
		return err
	}
	defer oldKeys.clear()
	newPass, err := newPassphrase()
	if err != nil {
		return err
	}
	defer clear(newPass)
	params, err := opt.validateNew(newPass)
	if err != nil {
		return err
	}
	pending, err := rotationPending(ctx, db)
	if err != nil {
		return err
	}
	if !pending {
		if _, err := migrateTo(ctx, db, &oldKeys, SchemaVersion); err != nil {
			return err
		}
		if err := verifyIntegrity(ctx, db, &oldKeys); err != nil {
			return err
		}
		if err := startRotation(ctx, db, &oldKeys); err != nil {
			return err
		}
	}
	sealedDEK, err := getMeta(ctx, db, metaRotationDEK)
	if err != nil {
		return err
	}
	dek2, err := openWith(oldKeys.seal, sealedDEK, rotationDEKAAD)
	if err != nil || len(dek2) != 32 {
		return fmt.Errorf("%w: the new key of the rotation fails authentication", ErrModified)
	}
	defer clear(dek2)
	newKeys, err := deriveSubKeys(dek2)
	if err != nil {
		return err
	}
	defer newKeys.clear()
	oldState, err := readIntegrityState(ctx, db, &oldKeys)
	if err != nil {
		return err
	}
	rs, err := readRotationState(ctx, db, &newKeys)
	if err != nil {
		return err
	}
	if pending {
		if err := verifyRotating(ctx, db, &oldKeys, &newKeys, &oldState, &rs); err != nil {
			return err
		}
	}
	var total, done int64
	for i := range authTables {
		total += oldState.counts[i]
		done += rs.newDone.counts[i]
	}
	if progress != nil {
		progress(done, total)
	}
	for rs.table < len(authTables) {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := rotateBatchTx(ctx, db, &oldKeys, &newKeys, &rs)
		if err != nil {
			return fmt.Errorf("changing the key: %w", err)
		}
		done += int64(n)
		if progress != nil && n > 0 {
			progress(done, total)
		}
	}
	// Derive the new passphrase's key before taking the write lock.
	hdr, wrapped, err := wrapDEK(dek2, newPass, params, derive)
	if err != nil {
		return err
	}
	if err := finishRotation(ctx, db, &oldKeys, &newKeys, &oldState, &rs, hdr, wrapped); err != nil {
		return err
	}
	var busy, frames, ckpt int
	if err := db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &frames, &ckpt); err != nil {
		return fmt.Errorf("the key was changed, but emptying the journal failed: %w", err)
	}
	if busy != 0 {
		return errors.New("the key was changed, but another program kept the library busy: " +
			"older versions of its rows stay in library.db-wal until it closes the library")
	}
	return nil
}

// startRotation draws the new data key and records the rotation, in one
// transaction.
func startRotation(ctx context.Context, db *sql.DB, oldKeys *subKeys) error {
	dek2 := make([]byte, 32)
	if _, err := rand.Read(dek2); err != nil {
		return fmt.Errorf("reading random key: %w", err)
	}
	defer clear(dek2)
	newKeys, err := deriveSubKeys(dek2)
	if err != nil {
		return err
	}
	defer newKeys.clear()
	sealed, err := sealWith(oldKeys.seal, dek2, rotationDEKAAD)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := setMeta(ctx, tx, metaRotationDEK, sealed); err != nil {
		return err
	}
	if err := writeRotationState(ctx, tx, &newKeys, &rotationState{}); err != nil {
		return err
	}
	return tx.Commit()
}

// rotateBatchTx converts the next batch of rows of table rs.table (or
// moves on to the next table when none are left) in one transaction, and
// returns how many rows it converted.
func rotateBatchTx(ctx context.Context, db *sql.DB, oldKeys, newKeys *subKeys, rs *rotationState) (int, error) {
	t := authTables[rs.table]
	sealedCols := sealedColumns[t.name]
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	cols := "rowid, " + strings.Join(t.cols, ", ") + ", mac"
	for _, c := range sealedCols {
		cols += ", " + c
	}
	rows, err := tx.QueryContext(ctx, `SELECT `+cols+` FROM `+t.name+` WHERE rowid > ? ORDER BY rowid LIMIT ?`, rs.row, rotateBatch)
	if err != nil {
		return 0, err
	}
	type row struct {
		rid    int64
		vals   []any
		mac    []byte
		sealed [][]byte
	}
	var batch []row
	for rows.Next() {
		r := row{vals: make([]any, len(t.cols)), sealed: make([][]byte, len(sealedCols))}
		dest := []any{&r.rid}
		for i := range r.vals {
			dest = append(dest, &r.vals[i])
		}
		dest = append(dest, &r.mac)
		for i := range r.sealed {
			dest = append(dest, &r.sealed[i])
		}
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return 0, err
		}
		batch = append(batch, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, r := range batch {
		if !hmac.Equal(oldKeys.rowMACOf(nil, t.name, r.vals), r.mac) {
			return 0, fmt.Errorf("%w: %s row %d does not match its MAC", ErrModified, t.name, r.rid)
		}
		set := make([]string, 0, len(sealedCols)+2)
		args := make([]any, 0, len(sealedCols)+3)
		var plain [][]byte
		for i, c := range sealedCols {
			if r.sealed[i] == nil {
				plain = append(plain, nil)
				continue
			}
			aad := fieldAAD(t.name, c, r.rid)
			p, err := openWith(oldKeys.seal, r.sealed[i], aad)
			if err != nil {
				return 0, fmt.Errorf("%s.%s of row %d: %w", t.name, c, r.rid, ErrTampered)
			}
			plain = append(plain, p)
			resealed, err := sealWith(newKeys.seal, p, aad)
			if err != nil {
				return 0, err
			}
			set = append(set, c+" = ?")
			args = append(args, resealed)
		}
		// The keyed ids are recomputed from the sealed plaintext.
		switch t.name {
		case "photos":
			if len(plain[0]) != sha256.Size {
				return 0, fmt.Errorf("photos.digest of row %d: %w", r.rid, ErrTampered)
			}
			id := newKeys.contentID([sha256.Size]byte(plain[0]))
			r.vals[colIndex(t, "content_mac")] = id
			set = append(set, "content_mac = ?")
			args = append(args, id)
		case "people":
			_, key, err := normaliseName(string(plain[0]))
			if err != nil {
				return 0, fmt.Errorf("people.name of row %d: %w", r.rid, err)
			}
			m := newKeys.mac(key)
			r.vals[colIndex(t, "name_mac")] = m
			set = append(set, "name_mac = ?")
			args = append(args, m)
		}
		for _, p := range plain {
			clear(p)
		}
		mac := newKeys.rowMACOf(nil, t.name, r.vals)
		set = append(set, "mac = ?")
		args = append(args, mac, r.rid)
		if _, err := tx.ExecContext(ctx, `UPDATE `+t.name+` SET `+strings.Join(set, ", ")+` WHERE rowid = ?`, args...); err != nil {
			return 0, err
		}
		rs.oldDone.add(rs.table, oldKeys.setValue(nil, r.mac))
		rs.newDone.add(rs.table, newKeys.setValue(nil, mac))
		rs.row = r.rid
	}
	if len(batch) < rotateBatch {
		rs.table, rs.row = rs.table+1, 0
	}
	// The keyed ids' updates fired the integrity triggers: this
	// transaction keeps the sums itself.
	if _, err := tx.ExecContext(ctx, `DELETE FROM integrity_dirty`); err != nil {
		return 0, err
	}
	if err := writeRotationState(ctx, tx, newKeys, rs); err != nil {
		return 0, err
	}
	return len(batch), tx.Commit()
}

// colIndex is the index of column c among t's authenticated columns.
func colIndex(t authTable, c string) int {
	for i, x := range t.cols {
		if x == c {
			return i
		}
	}
	panic("tagging: no column " + c + " in " + t.name)
}

// finishRotation installs the new key: the table sums under it, the new
// header and wrapped key, and the model versions re-sealed (resealModels),
// in one transaction that also ends the rotation.
func finishRotation(ctx context.Context, db *sql.DB, oldKeys, newKeys *subKeys, oldState *integrityState, rs *rotationState, hdr, wrapped []byte) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	st := rs.newDone
	if st.counts != oldState.counts || rs.oldDone.counts != oldState.counts || rs.oldDone.sums != oldState.sums {
		return fmt.Errorf("%w: the rows converted are not the rows the library had", ErrModified)
	}
	st.schema, st.useMetric, st.seed = oldState.schema, oldState.useMetric, oldState.seed
	if err := resealModels(ctx, tx, oldKeys, newKeys); err != nil {
		return err
	}
	if err := resealFederation(ctx, tx, oldKeys, newKeys); err != nil {
		return err
	}
	if err := writeIntegrityState(ctx, tx, newKeys, &st); err != nil {
		return err
	}
	if err := setMeta(ctx, tx, metaKDF, hdr); err != nil {
		return err
	}
	if err := setMeta(ctx, tx, metaDEK, wrapped); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM meta WHERE key IN (?, ?)`, metaRotationDEK, metaRotationState); err != nil {
		return err
	}
	return tx.Commit()
}

// verifyRotating checks a library whose rotation was interrupted: the rows
// converted (before rs's position) match their MACs under the new key and
// the new sums of rs; the others match theirs under the old key, and with
// the old sums of the converted rows make up the old state's sums.
func verifyRotating(ctx context.Context, db *sql.DB, oldKeys, newKeys *subKeys, oldState *integrityState, rs *rotationState) error {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM integrity_dirty`).Scan(&n); err != nil {
		return err
	}
	if n != 0 {
		return fmt.Errorf("%w: %d rows were written by another program", ErrModified, n)
	}
	schema, err := schemaDigest(ctx, db)
	if err != nil {
		return err
	}
	if schema != oldState.schema {
		return fmt.Errorf("%w: its schema (tables, indexes or triggers) was changed", ErrModified)
	}
	var gotOld, gotNew integrityState
	for i, t := range authTables {
		err := forEachRow(ctx, db, t, true, func(rid int64, vals []any, stored []byte) error {
			done := i < rs.table || (i == rs.table && rid <= rs.row)
			k, st := oldKeys, &gotOld
			if done {
				k, st = newKeys, &gotNew
			}
			if !hmac.Equal(k.rowMACOf(nil, t.name, vals), stored) {
				return fmt.Errorf("%w: %s row %d does not match its MAC", ErrModified, t.name, rid)
			}
			st.add(i, k.setValue(nil, stored))
			return nil
		})
		if err != nil {
			return err
		}
	}
	// The rows left under the old key plus those converted make the old state.
	for i := range authTables {
		gotOld.counts[i] += rs.oldDone.counts[i]
		var c uint64
		for j := range 4 {
			gotOld.sums[i][j], c = addWithCarry(gotOld.sums[i][j], rs.oldDone.sums[i][j], c)
		}
	}
	if gotNew.counts != rs.newDone.counts || gotNew.sums != rs.newDone.sums ||
		gotOld.counts != oldState.counts || gotOld.sums != oldState.sums {
		return fmt.Errorf("%w: rows were added, replaced or removed since the key change was interrupted", ErrModified)
	}
	return nil
}
