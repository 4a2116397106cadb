package dp

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/veil-privacy/veil/internal/atomicfile"
	"github.com/veil-privacy/veil/internal/digest"
)

// EnvLedgers names the environment variable that sets the default ledger
// folder.
const EnvLedgers = "VEIL_LEDGERS"

// ErrNoLedger is returned (wrapped) by LedgerDir.Read when the data set
// has no ledger yet.
var ErrNoLedger = errors.New("no ledger for this data set")

// ErrLedgerCorrupt is returned (wrapped) for a ledger file that cannot be
// trusted: unreadable, altered, written under another folder's key, or in
// an old format.
var ErrLedgerCorrupt = errors.New("the ledger file cannot be trusted")

const (
	ledgerKeyFile    = "ledger.key"
	ledgerFormat     = "veil-privacy-ledger"
	ledgerVersion    = 2
	ledgerMaxBytes   = 256 << 20
	ledgerFileSuffix = ".ledger"
)

// DefaultLedgerDir is where ledgers live unless a command is told
// otherwise: $VEIL_LEDGERS, else the user's data folder
// ($XDG_DATA_HOME/veil/ledgers, ~/.local/share/veil/ledgers; on macOS
// ~/Library/Application Support/veil/ledgers, on Windows
// %LocalAppData%\veil\ledgers).
func DefaultLedgerDir() (string, error) {
	if d := os.Getenv(EnvLedgers); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" && filepath.IsAbs(d) && runtime.GOOS != "windows" && runtime.GOOS != "darwin" {
		return filepath.Join(d, "veil", "ledgers"), nil
	}
	if runtime.GOOS == "windows" {
		if d := os.Getenv("LocalAppData"); d != "" {
			return filepath.Join(d, "veil", "ledgers"), nil
		}
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("dp: no ledger folder: set %s (%w)", EnvLedgers, err)
	}
	if runtime.GOOS == "darwin" {
		return filepath.Join(home, "Library", "Application Support", "veil", "ledgers"), nil
	}
	return filepath.Join(home, ".local", "share", "veil", "ledgers"), nil
}

// LedgerDir is a folder of data-set ledgers, one file per data set and
// unit (NAME.UNIT.ledger), and the folder's secret key (ledger.key, mode
// 0600), which keys the members' fingerprints and each file's MAC.
type LedgerDir struct {
	dir    string
	key    []byte
	curves *CurveCache
}

// OpenLedgerDir opens (creating it and its key, mode 0700, if needed) the
// ledger folder dir.
func OpenLedgerDir(dir string) (*LedgerDir, error) {
	if dir == "" {
		return nil, errors.New("dp: the ledger folder is not set")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("dp: ledger folder: %w", err)
	}
	key, err := ledgerKey(dir)
	if err != nil {
		return nil, err
	}
	c, err := NewCurveCache(nil, 0)
	if err != nil {
		return nil, err
	}
	return &LedgerDir{dir: dir, key: key, curves: c}, nil
}

// ledgerKey reads the folder's key, creating it first if there is none
// (linked into place, so two processes creating it at once agree).
func ledgerKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, ledgerKeyFile)
	b, rerr := os.ReadFile(path)
	if errors.Is(rerr, fs.ErrNotExist) {
		k := make([]byte, 32)
		if _, err := rand.Read(k); err != nil {
			return nil, err
		}
		// Published with a link (atomicfile.Create), the folder fsynced
		// after it: the key appears whole or not at all.
		err := atomicfile.CreateFile(path, []byte(hex.EncodeToString(k)+"\n"), 0o600)
		if errors.Is(err, fs.ErrExist) {
			err = nil // another process made it first: read theirs
		}
		if err != nil {
			return nil, fmt.Errorf("dp: creating the ledger key: %w", err)
		}
		b, rerr = os.ReadFile(path)
	}
	if rerr != nil {
		return nil, fmt.Errorf("dp: reading the ledger key: %w", rerr)
	}
	k, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(k) != 32 {
		return nil, fmt.Errorf("dp: the ledger key %s is damaged (want 64 hex digits): the folder's ledgers cannot be verified: %w", path, ErrLedgerCorrupt)
	}
	return k, nil
}

// Dir is the folder.
func (d *LedgerDir) Dir() string { return d.dir }

// Path is the file of set's ledger.
func (d *LedgerDir) Path(set DataSet) string {
	return filepath.Join(d.dir, set.Name+"."+set.Unit+ledgerFileSuffix)
}

// List returns the data sets with a ledger in the folder.
func (d *LedgerDir) List() ([]DataSet, error) {
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, fmt.Errorf("dp: ledger folder: %w", err)
	}
	var out []DataSet
	for _, e := range ents {
		n, ok := strings.CutSuffix(e.Name(), ledgerFileSuffix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		i := strings.LastIndexByte(n, '.')
		if i < 0 {
			continue
		}
		s := DataSet{Name: n[:i], Unit: n[i+1:]}
		if s.Validate() == nil {
			out = append(out, s)
		}
	}
	return out, nil
}

// Read returns set's ledger as it is on disk (ErrNoLedger, wrapped, when
// there is none). A file that is damaged, altered, written under another
// folder's key or in an old format is refused (ErrLedgerCorrupt).
func (d *LedgerDir) Read(set DataSet) (*DataLedger, error) {
	if err := set.Validate(); err != nil {
		return nil, err
	}
	path := d.Path(set)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("dp: %s in %s: %w", set, d.dir, ErrNoLedger)
	}
	if err != nil {
		return nil, fmt.Errorf("dp: ledger: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, ledgerMaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("dp: ledger %s: %w", path, err)
	}
	if len(b) > ledgerMaxBytes {
		return nil, fmt.Errorf("dp: ledger %s is over %d bytes: %w", path, ledgerMaxBytes, ErrLedgerCorrupt)
	}
	l, err := decodeDataLedger(b, d.key, set, d.curves)
	if err != nil {
		return nil, fmt.Errorf("dp: ledger %s: %w", path, err)
	}
	return l, nil
}

// Update applies fn to set's ledger (an empty one without a budget when
// there is none) and saves the result, holding the folder's lock on that
// ledger throughout, so that two commands charging the same data set at
// once both count. If fn fails, or changes nothing, nothing is written. The file is replaced
// atomically and durably: a temporary file, fsync, rename, fsync of the
// folder. The ledger must have a budget to be saved.
func (d *LedgerDir) Update(set DataSet, fn func(*DataLedger) error) (*DataLedger, error) {
	if err := set.Validate(); err != nil {
		return nil, err
	}
	unlock, err := lockFile(d.Path(set) + ".lock")
	if err != nil {
		return nil, fmt.Errorf("dp: locking the ledger of %s: %w", set, err)
	}
	defer unlock()
	l, err := d.Read(set)
	var old []byte
	if errors.Is(err, ErrNoLedger) {
		l, err = newDataLedger(set, d.key, d.curves)
	} else if err == nil {
		old, err = encodeDataLedger(l)
	}
	if err != nil {
		return nil, err
	}
	if err := fn(l); err != nil {
		return nil, err
	}
	if _, ok := l.Budget(); !ok {
		return nil, fmt.Errorf("dp: the ledger of data set %s needs a budget", set)
	}
	b, err := encodeDataLedger(l)
	if err != nil {
		return nil, err
	}
	if bytes.Equal(b, old) {
		return l, nil // nothing changed: the file is left as it was
	}
	if err := atomicfile.WriteFile(d.Path(set), b, 0o600); err != nil {
		return nil, fmt.Errorf("dp: saving the ledger of %s: %w", set, err)
	}
	return l, nil
}

// The file: {"format": "veil-privacy-ledger", "ledger": BODY, "mac": HEX},
// the MAC being HMAC-SHA256 under the folder's key of the compacted BODY.
type ledgerFileJSON struct {
	Format string          `json:"format"`
	Body   json.RawMessage `json:"ledger"`
	MAC    string          `json:"mac"`
}

type ledgerBodyJSON struct {
	Version int       `json:"version"`
	DataSet DataSet   `json:"data_set"`
	Budget  *Budget   `json:"budget"`
	Groups  []groupJS `json:"groups"`
	// Others are the charges on every member: those of a member no
	// charge has named.
	Others  []Event        `json:"others"`
	History []HistoryEntry `json:"history"`
}

type groupJS struct {
	Members []string `json:"members"` // hex fingerprints, ascending
	Events  []Event  `json:"events"`
}

// legacyLedgerJSON detects the version-1 format (dp.Ledger's).
type legacyLedgerJSON struct {
	Version    int             `json:"version"`
	Principals json.RawMessage `json:"principals"`
}

func ledgerMAC(key, body []byte) []byte {
	m := hmac.New(digest.New, key)
	m.Write([]byte("veil ledger file\x00"))
	m.Write(body)
	return m.Sum(nil)
}

// encodeDataLedger writes l in the file format.
func encodeDataLedger(l *DataLedger) ([]byte, error) {
	b := l.budget
	body := ledgerBodyJSON{Version: ledgerVersion, DataSet: l.set, Budget: &b, Groups: []groupJS{},
		Others: nonNil(l.others.acct.events), History: nonNil(l.history)}
	for _, g := range l.groups {
		gj := groupJS{Events: nonNil(g.acct.events)}
		for _, f := range g.members {
			gj.Members = append(gj.Members, hex.EncodeToString(f[:]))
		}
		body.Groups = append(body.Groups, gj)
	}
	bb, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("dp: encoding the ledger: %w", err)
	}
	out, err := json.Marshal(ledgerFileJSON{Format: ledgerFormat, Body: bb, MAC: hex.EncodeToString(ledgerMAC(l.key, bb))})
	if err != nil {
		return nil, fmt.Errorf("dp: encoding the ledger: %w", err)
	}
	return append(out, '\n'), nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// strictJSON decodes b into v refusing unknown fields and trailing data.
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON value")
	}
	return nil
}

// decodeDataLedger reads a ledger file of set, checking its MAC under key
// and everything it holds.
func decodeDataLedger(b, key []byte, set DataSet, curves *CurveCache) (*DataLedger, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrLedgerCorrupt)
	}
	var legacy legacyLedgerJSON
	if json.Unmarshal(b, &legacy) == nil && legacy.Version == 1 && legacy.Principals != nil {
		return nil, bad("this is a ledger in the format of older Veil versions (one file per output, version 1), which is no longer read: ledgers are now kept per data set in a ledger folder")
	}
	var file ledgerFileJSON
	if err := strictJSON(b, &file); err != nil {
		return nil, bad("not a ledger file (%v)", err)
	}
	if file.Format != ledgerFormat {
		return nil, bad("not a ledger file (format %q, want %q)", file.Format, ledgerFormat)
	}
	var body bytes.Buffer
	if err := json.Compact(&body, file.Body); err != nil {
		return nil, bad("the ledger's body is not JSON (%v)", err)
	}
	mac, err := hex.DecodeString(file.MAC)
	if err != nil || !hmac.Equal(mac, ledgerMAC(key, body.Bytes())) {
		return nil, bad("its MAC does not match: the file was altered, damaged, or written in another ledger folder (under another key)")
	}
	var in ledgerBodyJSON
	if err := strictJSON(body.Bytes(), &in); err != nil {
		return nil, bad("the ledger's body: %v", err)
	}
	if in.Version != ledgerVersion {
		return nil, bad("unsupported ledger version %d (this program reads version %d)", in.Version, ledgerVersion)
	}
	if in.DataSet != set {
		return nil, bad("the file holds the ledger of data set %s, not %s", in.DataSet, set)
	}
	if in.Budget == nil {
		return nil, bad("no budget")
	}
	if err := in.Budget.Validate(); err != nil {
		return nil, bad("%v", err)
	}
	l, err := newDataLedger(set, key, curves)
	if err != nil {
		return nil, err
	}
	l.budget = *in.Budget
	if len(in.Others) > 0 {
		if err := l.add(l.others, in.Others); err != nil {
			return nil, bad("the charges on every member: %v", err)
		}
	}
	for gi, gj := range in.Groups {
		if len(gj.Members) == 0 || len(gj.Events) == 0 {
			return nil, bad("group %d has no members or no charges", gi+1)
		}
		if !isSubsequence(in.Others, gj.Events) {
			return nil, bad("group %d lacks a charge made on every member", gi+1)
		}
		a, err := NewAccountant(nil)
		if err != nil {
			return nil, err
		}
		g := &group{acct: a}
		if err := l.add(g, gj.Events); err != nil {
			return nil, bad("group %d: %v", gi+1, err)
		}
		for _, h := range gj.Members {
			var f fingerprint
			if n, err := hex.Decode(f[:], []byte(h)); err != nil || n != len(f) || len(h) != 2*len(f) {
				return nil, bad("group %d: member fingerprint %.40q is not %d hex digits", gi+1, h, 2*len(f))
			}
			if k := len(g.members); k > 0 && bytes.Compare(g.members[k-1][:], f[:]) >= 0 {
				return nil, bad("group %d: member fingerprints are not in ascending order", gi+1)
			}
			if _, dup := l.where[f]; dup {
				return nil, bad("a member is in two groups")
			}
			l.where[f] = len(l.groups)
			g.members = append(g.members, f)
		}
		l.groups = append(l.groups, g)
	}
	for i, h := range in.History {
		switch h.Kind {
		case HistoryBudget, HistoryReset, HistoryCharge:
		default:
			return nil, bad("history entry %d: unknown kind %q", i+1, h.Kind)
		}
		if h.Time.IsZero() || math.IsNaN(h.Worst) || math.IsNaN(h.ChargeEpsilon) {
			return nil, bad("history entry %d is incomplete", i+1)
		}
	}
	l.history = in.History
	s, err := l.Spent(nil)
	if err != nil {
		return nil, bad("%v", err)
	}
	if s.Epsilon > l.budget.Epsilon*(1+1e-12) {
		return nil, bad("a member has spent ε = %.6g, more than the budget %g (charges are refused past the budget)", s.Epsilon, l.budget.Epsilon)
	}
	return l, nil
}

// isSubsequence reports whether sub appears in s in order.
func isSubsequence(sub, s []Event) bool {
	i := 0
	for _, e := range s {
		if i < len(sub) && eventEqual(sub[i], e) {
			i++
		}
	}
	return i == len(sub)
}

func eventEqual(a, b Event) bool {
	return a.Kind == b.Kind && a.SamplingRate == b.SamplingRate && a.NoiseMultiplier == b.NoiseMultiplier &&
		a.LaplaceScale == b.LaplaceScale && a.Epsilon == b.Epsilon && a.Count == b.Count && a.Label == b.Label &&
		slices.Equal(a.Orders, b.Orders) && slices.Equal(a.RDP, b.RDP)
}
