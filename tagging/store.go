package tagging

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"unicode/utf8"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver
)

// DBFile is the name of the library's database inside its folder.
const DBFile = "library.db"

// Errors a caller may test for with errors.Is.
var (
	// ErrWrongPassphrase: the passphrase does not unlock the library (or the
	// library's key header was altered).
	ErrWrongPassphrase = errors.New("wrong passphrase (or the library's key header is damaged)")
	// ErrNoLibrary: the folder holds no library.
	ErrNoLibrary = errors.New("no library here (create one with veil library init)")
	// ErrExists: Create found a library already in the folder.
	ErrExists = errors.New("a library already exists here")
	// ErrTampered: a sealed field failed authentication, because the file was
	// damaged or a ciphertext was altered or moved to another row or column.
	ErrTampered = errors.New("an encrypted field failed authentication: the library is damaged or was tampered with")
	// ErrEmptyPassphrase: Create or Rekey was given an empty passphrase.
	ErrEmptyPassphrase = errors.New("the passphrase is empty")
)

// CreateOptions configure a new library (and the new key of Rekey and
// RotateKey). The zero value means the defaults.
type CreateOptions struct {
	// KDF are the Argon2id parameters; zero means DefaultKDFParams. Costs
	// below MinKDFParams' are refused unless TestSettings is set.
	KDF KDFParams
	// TestSettings allows a passphrase shorter than MinPassphraseRunes and
	// Argon2id costs below the minimum (e.g. {Time: 1, MemoryKiB: 64,
	// Threads: 1}), so that tests and demos run fast. Never for a library
	// that holds real photos: such a key is cheap to guess.
	TestSettings bool
}

// MinPassphraseRunes is the shortest passphrase (in characters) a new key
// accepts without TestSettings.
const MinPassphraseRunes = 10

// MinKDFParams returns the lowest Argon2id costs a new key accepts without
// TestSettings: RFC 9106's second recommended option (t = 3 passes over
// m = 64 MiB). Costs pass when m is at least 64 MiB and t·m at least
// 3 × 64 MiB (so t = 1 over 2 GiB, the RFC's first option, passes too).
func MinKDFParams() KDFParams {
	return KDFParams{Time: 3, MemoryKiB: 64 << 10, Threads: 1}
}

// Errors of the key policy, for errors.Is.
var (
	// ErrWeakPassphrase: a new passphrase is shorter than MinPassphraseRunes.
	ErrWeakPassphrase = fmt.Errorf("the passphrase is shorter than %d characters", MinPassphraseRunes)
	// ErrWeakKDF: Argon2id costs below MinKDFParams'.
	ErrWeakKDF = errors.New("the Argon2id costs are below the minimum (3 passes over 64 MiB, or as much memory-time)")
)

// checkStrength refuses costs below the minimum (unless TestSettings).
func (o CreateOptions) checkStrength(p KDFParams) error {
	if o.TestSettings {
		return nil
	}
	m := MinKDFParams()
	if p.MemoryKiB < m.MemoryKiB || uint64(p.Time)*uint64(p.MemoryKiB) < uint64(m.Time)*uint64(m.MemoryKiB) {
		return fmt.Errorf("%w: %d passes over %d MiB asked (tests and demos may set test settings)", ErrWeakKDF, p.Time, p.MemoryKiB>>10)
	}
	return nil
}

// kdf returns the validated KDF parameters the options ask for.
func (o CreateOptions) kdf() (KDFParams, error) {
	if o.KDF == (KDFParams{}) {
		return DefaultKDFParams(), nil
	}
	if err := o.KDF.validate(); err != nil {
		return KDFParams{}, err
	}
	if err := o.checkStrength(o.KDF); err != nil {
		return KDFParams{}, err
	}
	return o.KDF, nil
}

// validateNew checks the options and the passphrase of a new key (Create,
// Rekey, RotateKey) and returns the KDF parameters to use.
func (o CreateOptions) validateNew(passphrase []byte) (KDFParams, error) {
	params, err := o.kdf()
	if err != nil {
		return KDFParams{}, err
	}
	if len(passphrase) == 0 {
		return KDFParams{}, fmt.Errorf("the new passphrase: %w", ErrEmptyPassphrase)
	}
	if !o.TestSettings && utf8.RuneCount(passphrase) < MinPassphraseRunes {
		return KDFParams{}, fmt.Errorf("the new passphrase: %w (tests and demos may set test settings)", ErrWeakPassphrase)
	}
	return params, nil
}

// Library is an open photo library: its database and the keys that unlock
// its sealed fields. A Library is safe for concurrent use by several
// goroutines (database/sql pools connections; SQLite serialises writers).
type Library struct {
	dir  string
	db   *sql.DB
	keys subKeys
	// dek is the data key, kept so Rekey can wrap it under a new
	// passphrase without deriving the old one's key again (Argon2id is
	// the whole cost of a rekey). Every sealed field's key is derived from
	// it and held here anyway, so keeping it exposes nothing more.
	dek []byte
	// header is the key header as it was when the library was unlocked:
	// Rekey refuses to replace a header another program wrote since.
	header []byte
	// derive is the key derivation (deriveKEK; tests count its calls).
	derive kdfFunc
	// mu guards dek and header against concurrent Rekeys.
	mu sync.Mutex
	// authenticated is set when the schema has the row MACs (version 5
	// on; tests make older libraries): every transaction then re-MACs
	// the rows it touched.
	authenticated bool
	// models caches the parsed active model version (models.go).
	models modelCache
	// watch is the connection ChangeCounter asks, opened on first use.
	watch struct {
		mu     sync.Mutex
		db     *sql.DB
		conn   *sql.Conn
		closed bool
	}
}

// kdfFunc turns a passphrase and a key header into the key-encryption key.
type kdfFunc func(passphrase []byte, h kdfHeader) []byte

// Create makes a new library in dir (created if missing, mode 0700), with a
// fresh random data key wrapped under the passphrase. It fails with ErrExists
// if dir already holds one.
func Create(dir string, passphrase []byte, opt CreateOptions) (*Library, error) {
	return create(context.Background(), dir, passphrase, opt, SchemaVersion, deriveKEK)
}

// create makes a library at a given schema version (tests make old ones)
// with the given key derivation.
func create(ctx context.Context, dir string, passphrase []byte, opt CreateOptions, version int, derive kdfFunc) (*Library, error) {
	if len(passphrase) == 0 {
		return nil, ErrEmptyPassphrase
	}
	params, err := opt.validateNew(passphrase)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the library folder: %w", err)
	}
	path := filepath.Join(dir, DBFile)
	// Create the file ourselves so it is private (SQLite gives the WAL and
	// shared-memory files the same mode) and so two creators cannot race.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("%s: %w", dir, ErrExists)
	}
	if err != nil {
		return nil, fmt.Errorf("creating the library: %w", err)
	}
	f.Close()
	fail := func(err error) (*Library, error) {
		os.Remove(path)
		os.Remove(path + "-wal")
		os.Remove(path + "-shm")
		return nil, err
	}
	db, err := openDB(path)
	if err != nil {
		return fail(err)
	}
	dek := make([]byte, 32)
	if _, err := rand.Read(dek); err != nil {
		db.Close()
		return fail(fmt.Errorf("reading random key: %w", err))
	}
	hdr, wrapped, err := wrapDEK(dek, passphrase, params, derive)
	if err != nil {
		clear(dek)
		db.Close()
		return fail(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err == nil {
		err = createMeta(tx)
		if err == nil {
			err = setMeta(ctx, tx, metaSchema, []byte("0"))
		}
		if err == nil {
			err = setMeta(ctx, tx, metaKDF, hdr)
		}
		if err == nil {
			err = setMeta(ctx, tx, metaDEK, wrapped)
		}
		if err != nil {
			tx.Rollback()
		} else {
			err = tx.Commit()
		}
	}
	var keys subKeys
	if err == nil {
		keys, err = deriveSubKeys(dek)
	}
	if err == nil {
		_, err = migrateTo(ctx, db, &keys, version)
	}
	if err != nil {
		clear(dek)
		keys.clear()
		db.Close()
		return fail(fmt.Errorf("creating the library: %w", err))
	}
	l := &Library{dir: dir, db: db, keys: keys, dek: dek, header: hdr, derive: derive,
		authenticated: version >= integritySchemaVersion}
	if l.authenticated {
		if err := l.loadSeed(ctx); err != nil {
			l.Close()
			return fail(err)
		}
	}
	return l, nil
}

// loadSeed takes the metric rotation's seed from the sealed state (it was
// derived from the first data key, and survives RotateKey).
func (l *Library) loadSeed(ctx context.Context) error {
	st, err := readIntegrityState(ctx, l.db, &l.keys)
	if err != nil {
		return err
	}
	l.keys.rotation = st.seed
	return nil
}

// Open unlocks the library in dir with the passphrase and migrates its
// schema to this build's version. A wrong passphrase gives
// ErrWrongPassphrase; a folder without a library gives ErrNoLibrary.
func Open(dir string, passphrase []byte) (*Library, error) {
	return open(context.Background(), dir, passphrase, deriveKEK)
}

// open is Open with the given key derivation (deriveKEK; tests count its
// calls). It derives the key-encryption key once.
func open(ctx context.Context, dir string, passphrase []byte, derive kdfFunc) (*Library, error) {
	return openChecked(ctx, dir, passphrase, derive, true)
}

// openChecked is open; check false skips the integrity checks (Open's
// verification and the per-row checks of the reads), which only
// BenchmarkIntegrityCost does, to measure what they cost against the
// reads as they were before them.
func openChecked(ctx context.Context, dir string, passphrase []byte, derive kdfFunc, check bool) (*Library, error) {
	path := filepath.Join(dir, DBFile)
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w", dir, ErrNoLibrary)
		}
		return nil, err
	}
	db, err := openDB(path)
	if err != nil {
		return nil, err
	}
	dek, header, err := unwrapDEK(ctx, db, passphrase, derive)
	if err != nil {
		db.Close()
		return nil, err
	}
	if pending, err := rotationPending(ctx, db); err != nil || pending {
		clear(dek)
		db.Close()
		if err == nil {
			err = ErrRotationPending
		}
		return nil, err
	}
	keys, err := deriveSubKeys(dek)
	if err != nil {
		clear(dek)
		db.Close()
		return nil, err
	}
	l := &Library{dir: dir, db: db, keys: keys, dek: dek, header: header, derive: derive}
	migrated, err := migrateTo(ctx, db, &l.keys, SchemaVersion)
	if err == nil && check {
		l.authenticated = true
		err = verifyIntegrity(ctx, db, &l.keys)
	}
	if err == nil {
		err = l.loadSeed(ctx)
	}
	if err == nil && migrated {
		// A migration may have replaced values that must not stay in the
		// files (version 4: the photos' plain hashes): empty the journal.
		// If another program holds it open, SQLite's own checkpoints
		// overwrite those frames later.
		_, err = l.checkpoint(ctx)
	}
	if err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// checkpoint copies the journal into the database and empties it, so the
// files keep no older version of a row that was rewritten. It reports
// whether another connection kept it from finishing.
func (l *Library) checkpoint(ctx context.Context) (busy bool, err error) {
	var b, frames, done int
	if err := l.db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&b, &frames, &done); err != nil {
		return false, fmt.Errorf("emptying the journal: %w", err)
	}
	return b != 0, nil
}

// openDB opens the SQLite file (which must exist) in WAL mode with foreign
// keys on, a busy timeout, transactions that take the write lock when they
// begin (so two writers queue instead of failing on lock upgrade), and
// secure_delete, so deleted rows (a forgotten person's sealed name, a
// replaced wrapped key) are overwritten rather than left in free space,
// and recursive_triggers, so that a row an INSERT OR REPLACE replaces is
// recorded by the integrity triggers like any other delete.
func openDB(path string) (*sql.DB, error) {
	dsn := "file:" + path + "?mode=rw&_txlock=immediate" +
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)" +
		"&_pragma=busy_timeout(10000)&_pragma=foreign_keys(ON)&_pragma=secure_delete(ON)" +
		"&_pragma=recursive_triggers(ON)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening the library: %w", err)
	}
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening the library: %w", err)
	}
	return db, nil
}

// readHeader reads the stored key header and wrapped data key.
func readHeader(ctx context.Context, q querier) (kdfHeader, []byte, []byte, error) {
	raw, err := getMeta(ctx, q, metaKDF)
	if err != nil {
		return kdfHeader{}, nil, nil, fmt.Errorf("reading the key header: %w", err)
	}
	h, err := decodeKDFHeader(raw)
	if err != nil {
		return kdfHeader{}, nil, nil, err
	}
	wrapped, err := getMeta(ctx, q, metaDEK)
	if err != nil {
		return kdfHeader{}, nil, nil, fmt.Errorf("reading the key header: %w", err)
	}
	return h, raw, wrapped, nil
}

// unwrapDEK reads the key header, derives the key-encryption key from the
// passphrase and unwraps the data key; it returns the data key and the
// header it was stored with.
func unwrapDEK(ctx context.Context, q querier, passphrase []byte, derive kdfFunc) (dek, header []byte, err error) {
	if len(passphrase) == 0 {
		return nil, nil, ErrEmptyPassphrase
	}
	h, raw, wrapped, err := readHeader(ctx, q)
	if err != nil {
		return nil, nil, err
	}
	kek := derive(passphrase, h)
	defer clear(kek)
	dek, err = openWith(kek, wrapped, dekAAD(raw))
	if err != nil || len(dek) != 32 {
		return nil, nil, ErrWrongPassphrase
	}
	return dek, raw, nil
}

// wrapDEK draws a salt, derives the key-encryption key and wraps dek; it
// returns the encoded header and the wrapped key.
func wrapDEK(dek, passphrase []byte, params KDFParams, derive kdfFunc) (header, wrapped []byte, err error) {
	h := kdfHeader{params: params, salt: make([]byte, saltLen)}
	if _, err := rand.Read(h.salt); err != nil {
		return nil, nil, fmt.Errorf("reading random salt: %w", err)
	}
	header = h.encode()
	kek := derive(passphrase, h)
	defer clear(kek)
	wrapped, err = sealWith(kek, dek, dekAAD(header))
	if err != nil {
		return nil, nil, fmt.Errorf("wrapping the key: %w", err)
	}
	return header, wrapped, nil
}

// ErrRekeyedMeanwhile: another program changed the library's passphrase
// after this one unlocked it.
var ErrRekeyedMeanwhile = errors.New("another program changed the passphrase since the library was unlocked: nothing changed (unlock it again with the current passphrase)")

// Rekey changes the passphrase of the library in dir from old to new: Open
// with old, then (*Library).Rekey. It derives each passphrase's key once.
// It fails with ErrWrongPassphrase if old does not unlock the library.
func Rekey(dir string, old, new []byte, opt CreateOptions) error {
	return rekey(context.Background(), dir, old, new, opt, deriveKEK)
}

// rekey is Rekey with the given key derivation.
func rekey(ctx context.Context, dir string, old, new []byte, opt CreateOptions, derive kdfFunc) error {
	if _, err := opt.validateNew(new); err != nil {
		return err
	}
	l, err := open(ctx, dir, old, derive)
	if err != nil {
		return err
	}
	defer l.Close()
	return l.Rekey(new, opt)
}

// Rekey changes the passphrase of the open library to new. Only the data
// key is re-wrapped (with a fresh salt, and opt's KDF parameters), in one
// transaction: nothing else is re-encrypted, and an interruption leaves
// the old passphrase working. The key of new is derived once, and the old
// passphrase's not again (the library holds the data key it unlocked), so a
// rekey costs one Argon2id derivation beyond the unlock. If another
// program changed the passphrase since this library was unlocked, Rekey
// changes nothing and returns ErrRekeyedMeanwhile: it never overwrites a
// newer passphrase with one wrapped from a stale header. The journal is
// then checkpointed and emptied so the files keep no copy of the key
// wrapped under the old passphrase.
//
// The data key itself does not change: a copy of the library or of its key
// header made before the rekey still opens it with the old passphrase, and
// anyone who unwrapped the data key with it keeps it. Against those, use
// RotateKey (veil library rekey), which replaces the data key.
func (l *Library) Rekey(new []byte, opt CreateOptions) error {
	ctx := context.Background()
	params, err := opt.validateNew(new)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dek == nil {
		return errors.New("rekeying: the library is closed")
	}
	// Derive before taking the write lock: Argon2id takes about a second,
	// and other programs may write meanwhile.
	hdr, wrapped, err := wrapDEK(l.dek, new, params, l.derive)
	if err != nil {
		return err
	}
	err = l.inTx(ctx, func(tx *sql.Tx) error {
		_, current, _, err := readHeader(ctx, tx)
		if err != nil {
			return err
		}
		if !bytes.Equal(current, l.header) {
			return ErrRekeyedMeanwhile
		}
		if err := setMeta(ctx, tx, metaKDF, hdr); err != nil {
			return err
		}
		return setMeta(ctx, tx, metaDEK, wrapped)
	})
	if errors.Is(err, ErrRekeyedMeanwhile) {
		return err
	}
	if err != nil {
		return fmt.Errorf("rekeying: %w", err)
	}
	l.header = hdr
	// The old wrapped key is still in the WAL's older frames: copy the WAL
	// into the database and empty it, so the files no longer hold anything
	// the old passphrase opens. This waits for other connections (the busy
	// timeout) to finish what they are reading.
	busy, err := l.checkpoint(ctx)
	if err != nil {
		return fmt.Errorf("the passphrase was changed, but clearing the old key from the journal failed: %w", err)
	}
	if busy {
		return errors.New("the passphrase was changed, but another program kept the library busy: " +
			"the old key stays in library.db-wal until it closes the library (then rekey again)")
	}
	return nil
}

// Close closes the database and clears the keys held in memory.
func (l *Library) Close() error {
	l.mu.Lock()
	clear(l.dek)
	l.dek = nil
	l.mu.Unlock()
	l.keys.clear()
	l.watch.mu.Lock()
	if l.watch.conn != nil {
		l.watch.conn.Close()
		l.watch.db.Close()
		l.watch.conn, l.watch.db = nil, nil
	}
	l.watch.closed = true
	l.watch.mu.Unlock()
	return l.db.Close()
}

// ChangeCounter returns a number that changes whenever a transaction
// changing the library is committed, by this Library or by any other
// program (another veil command): SQLite's data_version, read on a
// connection of its own that never writes. Two equal values mean nothing
// was committed in between, so a value derived from the library (a
// server's cached suggestions) can be reused; the number says nothing
// else. It costs one query.
func (l *Library) ChangeCounter(ctx context.Context) (int64, error) {
	l.watch.mu.Lock()
	defer l.watch.mu.Unlock()
	if l.watch.closed {
		return 0, errors.New("reading the library's change counter: the library is closed")
	}
	if l.watch.conn == nil {
		db, err := openDB(filepath.Join(l.dir, DBFile))
		if err != nil {
			return 0, err
		}
		// One connection, held: data_version is counted per connection.
		conn, err := db.Conn(ctx)
		if err != nil {
			db.Close()
			return 0, fmt.Errorf("opening the library's change counter: %w", err)
		}
		l.watch.db, l.watch.conn = db, conn
	}
	var v int64
	if err := l.watch.conn.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&v); err != nil {
		return 0, fmt.Errorf("reading the library's change counter: %w", err)
	}
	return v, nil
}

// Dir is the library's folder.
func (l *Library) Dir() string { return l.dir }

// CheckIntegrity runs SQLite's integrity and foreign-key checks on the
// library's database, then checks every row's MAC and the table sums (as
// Open does), and returns an error describing the first problem found
// (nil when the file is sound); ErrModified when the file was changed
// outside Veil. It decrypts nothing.
func (l *Library) CheckIntegrity(ctx context.Context) error {
	var ok string
	if err := l.db.QueryRowContext(ctx, `PRAGMA integrity_check(1)`).Scan(&ok); err != nil {
		return fmt.Errorf("checking the library: %w", err)
	}
	if ok != "ok" {
		return fmt.Errorf("the library's database is damaged: %s", ok)
	}
	rows, err := l.db.QueryContext(ctx, `PRAGMA foreign_key_check`)
	if err != nil {
		return fmt.Errorf("checking the library: %w", err)
	}
	defer rows.Close()
	if rows.Next() {
		var table, parent string
		var row sql.NullInt64
		var fk int
		if err := rows.Scan(&table, &row, &parent, &fk); err != nil {
			return fmt.Errorf("checking the library: %w", err)
		}
		return fmt.Errorf("the library's database is damaged: row %d of %s refers to a missing row of %s", row.Int64, table, parent)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("checking the library: %w", err)
	}
	rows.Close()
	if l.authenticated {
		return verifyIntegrity(ctx, l.db, &l.keys)
	}
	return nil
}

// Seal encrypts plain for the column of the given table and row with
// XChaCha20-Poly1305 under the library's field key and a random 24-byte
// nonce. The result is bound to "veil/tagging/v1|table|column|row": Unseal
// refuses it anywhere else.
func (l *Library) Seal(table, column string, row int64, plain []byte) ([]byte, error) {
	return sealWith(l.keys.seal, plain, fieldAAD(table, column, row))
}

// Unseal decrypts a field sealed by Seal for the same table, column and row.
// Anything else (a damaged or altered ciphertext, one copied from another
// row or column, another library's) gives ErrTampered.
func (l *Library) Unseal(table, column string, row int64, sealed []byte) ([]byte, error) {
	b, err := openWith(l.keys.seal, sealed, fieldAAD(table, column, row))
	if err != nil {
		return nil, fmt.Errorf("%s.%s of row %d: %w", table, column, row, ErrTampered)
	}
	return b, nil
}

// RotationSeed is the secret seed of the library's random metric rotation
// (issue 15 §6; metric.RandomRotation takes it), derived from the data key
// with HKDF under its own label: it survives Rekey and differs between
// libraries. Do not log or store it.
func (l *Library) RotationSeed() [32]byte { return l.keys.rotation }

// inTx runs f in one transaction (IMMEDIATE: it holds the write lock from
// the start), committing if f succeeds.
func (l *Library) inTx(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		tx.Rollback()
		return err
	}
	if l.authenticated {
		if err := l.sealDirty(ctx, tx); err != nil {
			tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}
