package keygen

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"

	"github.com/veil-privacy/veil/internal/atomicfile"
	"github.com/veil-privacy/veil/secagg/dphe"
	"github.com/veil-privacy/veil/secagg/paillier"
)

// stateVersion is the version of the state file's format.
const stateVersion = 1

// stateFile and lockFile are the names of the files in the state folder.
const (
	stateFile = "keygen.state"
	lockFile  = "keygen.lock"
)

// state is what the key generator keeps on disk (stateFile, 0600): its
// private key, the last round set up, every open round's parameters,
// seed and client names, and the newest revocation list number accepted.
// Finished rounds are absent: that and Last make them refused forever.
type state struct {
	Version   int          `json:"version"`
	Key       []byte       `json:"key"`
	FracBits  int          `json:"frac_bits"`
	Started   bool         `json:"started"`
	Last      uint64       `json:"last"`
	Rounds    []roundEntry `json:"rounds"`
	CRLNumber string       `json:"crl_number,omitempty"`
}

// roundEntry is one open round.
type roundEntry struct {
	Round    uint64        `json:"round"`
	Dim      int           `json:"dim"`
	Capacity int           `json:"capacity"`
	Users    []uint32      `json:"users"`
	Clients  []string      `json:"clients"`
	Packing  *dphe.Packing `json:"packing,omitempty"`
	Seed     []byte        `json:"seed"`
}

// store is the state folder: the state file, written atomically, and a
// lock held while the folder is open, so two key generators never share
// one state (they could decrypt a round once each).
type store struct {
	dir  string
	lock *os.File
}

// openStore creates dir (0700) if needed and locks it.
func openStore(dir string) (*store, error) {
	if dir == "" {
		return nil, errors.New("keygen: no state folder given")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("keygen: state folder: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("keygen: state folder lock: %w", err)
	}
	if err := tryLock(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("keygen: the state folder %s is in use by another key generator: %w", dir, err)
	}
	return &store{dir: dir, lock: f}, nil
}

func (s *store) path() string { return filepath.Join(s.dir, stateFile) }

// close releases the lock.
func (s *store) close() error {
	unlock(s.lock)
	return s.lock.Close()
}

// load reads the state, or returns nil if there is none yet.
func (s *store) load() (*state, error) {
	b, err := os.ReadFile(s.path())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("keygen: reading %s: %w", s.path(), err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("keygen: %s is not a key generator's state: %w", s.path(), err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("keygen: %s has format version %d, this build reads %d", s.path(), st.Version, stateVersion)
	}
	return &st, nil
}

// save replaces the state file atomically and durably.
func (s *store) save(st *state) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("keygen: encoding state: %w", err)
	}
	if err := atomicfile.Write(s.path(), 0o600, func(w io.Writer) error { _, err := w.Write(b); return err }); err != nil {
		return fmt.Errorf("keygen: writing %s: %w", s.path(), err)
	}
	return nil
}

// snapshot converts the state's rounds to a dphe.Snapshot and the client
// names per round.
func (st *state) snapshot() (*dphe.Snapshot, map[uint64][]string, error) {
	snap := &dphe.Snapshot{Started: st.Started, Last: st.Last}
	names := map[uint64][]string{}
	for _, r := range st.Rounds {
		if len(r.Seed) != 32 || len(r.Clients) != len(r.Users) {
			return nil, nil, fmt.Errorf("keygen: state's round %d is malformed", r.Round)
		}
		rec := dphe.RoundRecord{Params: dphe.RoundParams{Round: r.Round, Dim: r.Dim, Capacity: r.Capacity, Users: r.Users, Packing: r.Packing}}
		copy(rec.Seed[:], r.Seed)
		snap.Rounds = append(snap.Rounds, rec)
		names[r.Round] = r.Clients
	}
	return snap, names, nil
}

// setRounds replaces the state's rounds with a key generator's snapshot.
func (st *state) setRounds(snap *dphe.Snapshot, names map[uint64][]string) {
	st.Started, st.Last, st.Rounds = snap.Started, snap.Last, nil
	for _, r := range snap.Rounds {
		st.Rounds = append(st.Rounds, roundEntry{Round: r.Params.Round, Dim: r.Params.Dim, Capacity: r.Params.Capacity,
			Users: r.Params.Users, Clients: names[r.Params.Round], Packing: r.Params.Packing, Seed: r.Seed[:]})
	}
}

// crlNumber returns the state's revocation list number (nil: none).
func (st *state) crlNumber() (*big.Int, error) {
	if st.CRLNumber == "" {
		return nil, nil
	}
	n, ok := new(big.Int).SetString(st.CRLNumber, 10)
	if !ok {
		return nil, fmt.Errorf("keygen: state's revocation list number %q is not a number", st.CRLNumber)
	}
	return n, nil
}

// newKey generates the key generator's Paillier key.
func newKey(bits int, insecure bool, random io.Reader) (*paillier.PrivateKey, []byte, error) {
	sk, err := paillier.GenerateKey(paillier.KeyOptions{Bits: bits, AllowInsecureTestKeySize: insecure, Random: random})
	if err != nil {
		return nil, nil, fmt.Errorf("keygen: %w", err)
	}
	b, err := sk.MarshalBinary()
	if err != nil {
		return nil, nil, fmt.Errorf("keygen: %w", err)
	}
	return sk, b, nil
}
