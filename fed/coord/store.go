package coord

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	_ "modernc.org/sqlite" // the pure-Go SQLite driver

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/wire"
)

// schemaVersion is the version of the database layout this build writes;
// migrations bring older files up to it.
const schemaVersion = 3

var migrations = []string{
	// 1: the first layout.
	`CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
	CREATE TABLE clients (
		id TEXT PRIMARY KEY,
		budget_epsilon REAL NOT NULL,
		budget_delta REAL NOT NULL,
		unit TEXT NOT NULL,
		updates INTEGER NOT NULL DEFAULT 0,
		ledger BLOB NOT NULL,
		enrolled_ms INTEGER NOT NULL);
	CREATE TABLE models (
		version TEXT PRIMARY KEY,
		round INTEGER NOT NULL,
		header BLOB NOT NULL,
		payload BLOB NOT NULL,
		state BLOB,
		created_ms INTEGER NOT NULL);
	CREATE TABLE rounds (
		round INTEGER PRIMARY KEY,
		state TEXT NOT NULL CHECK (state IN ('open', 'done', 'failed')),
		model_version TEXT NOT NULL,
		config BLOB NOT NULL,
		deadline_ms INTEGER NOT NULL,
		updates INTEGER NOT NULL DEFAULT 0,
		reason TEXT NOT NULL DEFAULT '',
		sum BLOB,
		sum_weight REAL NOT NULL DEFAULT 0);
	CREATE TABLE round_clients (
		round INTEGER NOT NULL,
		client TEXT NOT NULL,
		counted INTEGER NOT NULL DEFAULT 0,
		PRIMARY KEY (round, client));`,
	// 2: a selected client's withdrawal from its round (the reason it
	// gave, or "revoked"), and the serial number of the certificate a
	// client last joined with, so a revoked client is recognised after a
	// restart.
	`ALTER TABLE round_clients ADD COLUMN withdrawn TEXT NOT NULL DEFAULT '';
	ALTER TABLE clients ADD COLUMN serial TEXT NOT NULL DEFAULT '';`,
	// 3: a secure round's phase and the messages it accepted (key
	// adverts with their certificates, shares, masked vectors, unmasking
	// responses), kept until the round closes so a restarted coordinator
	// finishes it (see maskingRound).
	`CREATE TABLE secagg_rounds (round INTEGER PRIMARY KEY, phase INTEGER NOT NULL);
	CREATE TABLE secagg (
		round INTEGER NOT NULL,
		client TEXT NOT NULL,
		kind TEXT NOT NULL,
		data BLOB NOT NULL,
		PRIMARY KEY (round, client, kind));`,
}

// store is the coordinator's state in one SQLite file (WAL): enrolled
// clients with their budgets and ledgers, model versions, the round log, and
// for the open round its selection, the clients already counted and the
// running sum. Every change is one transaction, so after a crash the file
// holds each accepted update exactly once or not at all.
type store struct {
	db *sql.DB
	// commits counts the transactions committed by tx.
	commits atomic.Int64
}

func openStore(path string) (*store, error) {
	// A new file gets 64 KiB pages (a file that exists keeps its own; see
	// largePages):
	// every transaction that folds updates rewrites the open round's
	// running sum, 8 bytes per value (4.5 MB for the embedding head), as a
	// chain of overflow pages, each one logged to the WAL and later
	// checkpointed. With 4 KiB pages that is over a thousand pages per
	// transaction, past the WAL's automatic checkpoint of 1000 pages, so
	// every transaction also copied the whole sum into the database file;
	// with 64 KiB pages it is about seventy, and a checkpoint copies the
	// latest sum once per dozen transactions. Durability is the same:
	// synchronous(FULL) syncs the WAL at every commit.
	//
	// The file holds every client's ledger and, while a round is open, the
	// running sum of its updates (with one update, the update itself), so
	// it is its owner's alone (0600, also its -wal and -shm, which SQLite
	// creates with the database's mode; a new folder 0700), and nothing
	// deleted stays in it: secure_delete(ON) overwrites every freed page
	// with zeros, and wipe empties the write-ahead log once the sum changes
	// (see wipe).
	if err := prepareStateFile(path); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)&_pragma=foreign_keys(ON)&_pragma=secure_delete(ON)")
	if err != nil {
		return nil, fmt.Errorf("coordinator: opening %s: %w", path, err)
	}
	db.SetMaxOpenConns(1) // one writer; SQLite serialises anyway
	s := &store{db: db}
	if err := s.largePages(); err != nil {
		db.Close()
		return nil, fmt.Errorf("coordinator: %s: %w", path, err)
	}
	if err := s.migrate(); err != nil {
		db.Close()
		return nil, fmt.Errorf("coordinator: %s: %w", path, err)
	}
	return s, nil
}

func (s *store) close() error { return s.db.Close() }

// stateFileMode is the mode of the state file and of SQLite's files beside
// it; stateDirMode that of a state folder the coordinator creates.
const (
	stateFileMode os.FileMode = 0o600
	stateDirMode  os.FileMode = 0o700
)

// prepareStateFile creates the state file's folder (0700) if it is
// missing and the file itself (0600) if it is new, and takes away any
// group or other permission from an existing file and from its -wal,
// -shm and -journal files. SQLite creates those with the database file's
// mode, so they are its owner's alone too.
func prepareStateFile(path string) error {
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, stateDirMode); err != nil {
			return fmt.Errorf("coordinator: creating the state file's folder: %w", err)
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, stateFileMode)
	if err != nil {
		return fmt.Errorf("coordinator: opening %s: %w", path, err)
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
		fi, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("coordinator: %w", err)
		}
		if fi.Mode().Perm()&^stateFileMode != 0 {
			if err := os.Chmod(p, stateFileMode); err != nil {
				return fmt.Errorf("coordinator: making %s its owner's only: %w", p, err)
			}
		}
	}
	return nil
}

// wipe empties the write-ahead log: it copies what the log holds into the
// database file (where secure_delete has zeroed every page freed) and
// truncates the log to nothing. Until then the log keeps every version of
// the pages written since it was last emptied, earlier running sums among
// them (two consecutive sums differ by the updates folded between them),
// so the coordinator wipes after every transaction that changes the sum.
// It reports false if a reader still uses the log (veil fed status reading
// the file), in which case the log is kept and wipe must be called again.
func (s *store) wipe(ctx context.Context) (bool, error) {
	var busy, logFrames, checkpointed int
	if err := s.db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &logFrames, &checkpointed); err != nil {
		return false, fmt.Errorf("coordinator: emptying the write-ahead log: %w", err)
	}
	return busy == 0, nil
}

// largePages gives a new, still empty state file 64 KiB pages. The
// driver applies the connection's pragmas in alphabetical order, so
// journal_mode(WAL) has already fixed the page size when page_size would
// run; a database's page size changes only outside WAL mode, by a VACUUM.
func (s *store) largePages() error {
	var v, tables int
	if err := s.db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		return err
	}
	if err := s.db.QueryRow(`SELECT COUNT(*) FROM sqlite_schema`).Scan(&tables); err != nil {
		return err
	}
	if v != 0 || tables != 0 {
		return nil
	}
	for _, q := range []string{`PRAGMA journal_mode = DELETE`, `PRAGMA page_size = 65536`, `VACUUM`, `PRAGMA journal_mode = WAL`} {
		if _, err := s.db.Exec(q); err != nil {
			return fmt.Errorf("setting up the state file: %w", err)
		}
	}
	return nil
}

func (s *store) migrate() error {
	var v int
	if err := s.db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		return err
	}
	if v > schemaVersion {
		return fmt.Errorf("the state file has schema version %d, newer than this build's %d: use a newer veil", v, schemaVersion)
	}
	for ; v < schemaVersion; v++ {
		tx, err := s.db.Begin()
		if err != nil {
			return err
		}
		if _, err := tx.Exec(migrations[v]); err != nil {
			tx.Rollback()
			return fmt.Errorf("migrating the state file to version %d: %w", v+1, err)
		}
		if _, err := tx.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, v+1)); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

func (s *store) tx(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.commits.Add(1)
	return nil
}

func getMeta(q interface {
	QueryRow(string, ...any) *sql.Row
}, key string) ([]byte, error) {
	var b []byte
	err := q.QueryRow(`SELECT value FROM meta WHERE key = ?`, key).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return b, err
}

func setMeta(tx *sql.Tx, key string, value []byte) error {
	_, err := tx.Exec(`INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value`, key, value)
	return err
}

// putModel stores a model version, its header and payload as encoded
// (wire.Weights.Encode), and its strategy state (idempotent).
func putModel(tx *sql.Tx, version string, round uint64, header *fedpb.WeightsHeader, payload []byte, state wire.Weights) error {
	h, err := proto.Marshal(header)
	if err != nil {
		return err
	}
	var st []byte
	if state != nil {
		st = state.Payload()
	}
	_, err = tx.Exec(`INSERT OR IGNORE INTO models (version, round, header, payload, state, created_ms) VALUES (?, ?, ?, ?, ?, ?)`,
		version, round, h, payload, st, time.Now().UnixMilli())
	return err
}

// loadModel reads a model version and its strategy state (nil if none).
func (s *store) loadModel(version string) (w, state wire.Weights, err error) {
	var h, payload, st []byte
	if err := s.db.QueryRow(`SELECT header, payload, state FROM models WHERE version = ?`, version).Scan(&h, &payload, &st); err != nil {
		return nil, nil, fmt.Errorf("coordinator: model %s: %w", version, err)
	}
	var hdr fedpb.WeightsHeader
	if err := proto.Unmarshal(h, &hdr); err != nil {
		return nil, nil, fmt.Errorf("coordinator: model %s: %w", version, err)
	}
	w, err = decodeStored(&hdr, payload)
	if err != nil {
		return nil, nil, fmt.Errorf("coordinator: model %s: %w", version, err)
	}
	if len(st) > 0 {
		state = w.Clone()
		if err := fillValues(state, st); err != nil {
			return nil, nil, fmt.Errorf("coordinator: model %s state: %w", version, err)
		}
	}
	return w, state, nil
}

func decodeStored(h *fedpb.WeightsHeader, payload []byte) (wire.Weights, error) {
	d, err := wire.NewDecoder(h, wire.Limits{MaxBytes: uint64(len(payload)) + 1})
	if err != nil {
		return nil, err
	}
	if len(payload) > 0 {
		if err := d.Write(payload); err != nil {
			return nil, err
		}
	}
	return d.Finish()
}

func fillValues(w wire.Weights, b []byte) error {
	if len(b) != 4*w.Len() {
		return fmt.Errorf("%d bytes for %d values", len(b), w.Len())
	}
	off := 0
	for i := range w {
		for j := range w[i].Values {
			w[i].Values[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[off:]))
			off += 4
		}
	}
	return nil
}

// appendSum appends the running sum's stored bytes (float64
// little-endian) to b.
func appendSum(b []byte, v []float64) []byte {
	b = slices.Grow(b, 8*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	return b
}

func decodeSum(b []byte, n int) ([]float64, error) {
	if len(b) != 8*n {
		return nil, fmt.Errorf("coordinator: stored running sum has %d bytes, want %d", len(b), 8*n)
	}
	v := make([]float64, n)
	for i := range v {
		v[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return v, nil
}

// clientLedger decodes a client's ledger.
func clientLedger(b []byte) (*dp.Ledger, error) {
	l, err := dp.UnmarshalLedger(b)
	if err != nil {
		return nil, fmt.Errorf("coordinator: a stored ledger: %w", err)
	}
	return l, nil
}

func marshalLedger(l *dp.Ledger) ([]byte, error) { return json.Marshal(l) }

// bufferPool recycles the byte buffers updates are received into (one
// payload each: 2.2 MB for the embedding head).
type bufferPool struct{ p sync.Pool }

// get returns a buffer of capacity at least n (contents undefined).
func (bp *bufferPool) get(n int) *[]byte {
	if b, ok := bp.p.Get().(*[]byte); ok && cap(*b) >= n {
		return b
	}
	b := make([]byte, 0, n)
	return &b
}

func (bp *bufferPool) put(b *[]byte) { bp.p.Put(b) }
