package dphe

import (
	"crypto/rand"
	"fmt"
	"io"
	"math"
	"math/big"
	"slices"
	"sync"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/secagg/paillier"
)

// UserOptions configures a User.
type UserOptions struct {
	// Encrypter configures Paillier encryption (randomness variant, pool).
	Encrypter paillier.EncrypterOptions
	// Random drives shard assignment, padding positions and the checksum
	// shares; nil means crypto/rand.
	Random io.Reader
	// Progress, if not nil, is told about every encryption of Encrypt.
	Progress paillier.Progress
	// Privacy is the DP noise every contribution carries (required; see
	// Privacy).
	Privacy *Privacy
}

// User is one data owner U⁽ⁿ⁾ in one round (Algorithm 1, steps 3–4).
type User struct {
	keys     *UserKeys
	enc      *paillier.Encrypter
	fp       *paillier.FixedPoint
	random   io.Reader
	progress paillier.Progress
	privacy  Privacy
	events   []dp.Event // what one contribution costs
	noise    *dp.Source

	mu   sync.Mutex
	sent bool
}

// NewUser checks the keys and the privacy options and prepares
// encryption. It refuses a user without Privacy.
func NewUser(keys *UserKeys, opts UserOptions) (*User, error) {
	if keys == nil || keys.PublicKey == nil {
		return nil, fmt.Errorf("dphe: user: missing keys")
	}
	if err := opts.Privacy.validate(); err != nil {
		return nil, err
	}
	if keys.Dim < 1 || keys.Dim > MaxDim || keys.Capacity < 1 || keys.Capacity > keys.Dim {
		return nil, fmt.Errorf("dphe: user %d: dimension %d / capacity %d invalid", keys.UserID, keys.Dim, keys.Capacity)
	}
	if len(keys.Phi) != keys.Dim || len(keys.PhiUser) != keys.Dim {
		return nil, fmt.Errorf("dphe: user %d: permutations of lengths %d and %d, want %d", keys.UserID, len(keys.Phi), len(keys.PhiUser), keys.Dim)
	}
	if _, err := invertPerm(keys.Phi); err != nil {
		return nil, fmt.Errorf("dphe: user %d: φ: %w", keys.UserID, err)
	}
	if _, err := invertPerm(keys.PhiUser); err != nil {
		return nil, fmt.Errorf("dphe: user %d: φ⁽ⁿ⁾: %w", keys.UserID, err)
	}
	if err := keys.Packing.Check(keys.PublicKey, keys.FracBits); err != nil {
		return nil, fmt.Errorf("dphe: user %d: %w", keys.UserID, err)
	}
	if keys.Packing != nil && keys.Packing.Blocks() != keys.Dim {
		return nil, fmt.Errorf("dphe: user %d: packing of %d blocks in a round of dimension %d", keys.UserID, keys.Packing.Blocks(), keys.Dim)
	}
	if t := keys.ChecksumOffset; t == nil || t.Sign() < 0 || t.Cmp(keys.PublicKey.N()) >= 0 {
		return nil, fmt.Errorf("dphe: user %d: checksum offset missing or outside [0, n)", keys.UserID)
	}
	enc, err := paillier.NewEncrypter(keys.PublicKey, opts.Encrypter)
	if err != nil {
		return nil, fmt.Errorf("dphe: user %d: %w", keys.UserID, err)
	}
	fp, err := paillier.NewFixedPoint(keys.PublicKey, keys.FracBits)
	if err != nil {
		return nil, fmt.Errorf("dphe: user %d: %w", keys.UserID, err)
	}
	random := opts.Random
	if random == nil {
		random = rand.Reader
	}
	lanes := 1
	if keys.Packing != nil {
		lanes = keys.Packing.Lanes
	}
	evs, err := ContributionEvents(*opts.Privacy, keys.Coordinates(), lanes)
	if err != nil {
		return nil, err
	}
	for i := range evs {
		evs[i].Label = fmt.Sprintf("%s, round %d", evs[i].Label, keys.Round)
	}
	noise := opts.Privacy.Source
	if noise == nil {
		if noise, err = dp.NewSource(); err != nil {
			return nil, fmt.Errorf("dphe: user %d: %w", keys.UserID, err)
		}
	}
	return &User{keys: keys, enc: enc, fp: fp, random: random, progress: opts.Progress, privacy: *opts.Privacy, events: evs, noise: noise}, nil
}

// Events returns the privacy events one contribution charges: the
// Gaussian release and, when Privacy.Select is set, the selection.
func (u *User) Events() []dp.Event { return slices.Clone(u.events) }

// Coordinates returns the update's dimension: Dim, or Packing.Coordinates
// when the round packs.
func (k *UserKeys) Coordinates() int {
	if k.Packing != nil {
		return k.Packing.Coordinates
	}
	return k.Dim
}

// Encrypter returns the user's Paillier encrypter, e.g. to precompute randomness.
func (u *User) Encrypter() *paillier.Encrypter { return u.enc }

// Encrypt releases a D-dimensional update with the user's DP noise (see
// Privacy; the ledger is charged first), turns the noisy update into
// ⌈nz/M⌉ messages (at least one), each with exactly M entries, and encodes
// them. A user encrypts once per round.
func (u *User) Encrypt(update []float64) ([][]byte, error) {
	msgs, err := u.EncryptMessages(update)
	if err != nil {
		return nil, err
	}
	return u.encode(msgs)
}

// encode encodes messages under the user's public key.
func (u *User) encode(msgs []*Message) ([][]byte, error) {
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		var err error
		if out[i], err = m.Encode(u.keys.PublicKey); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Encrypt32 is Encrypt for a float32 update.
func (u *User) Encrypt32(update []float32) ([][]byte, error) { return u.Encrypt(widen(update)) }

// widen converts a float32 update to float64, exactly.
func widen(update []float32) []float64 {
	w := make([]float64, len(update))
	for i, x := range update {
		w[i] = float64(x)
	}
	return w
}

// EncryptMessages is Encrypt without the final encoding. The update is
// checked (length, finite values) before the ledger is charged; a refused
// charge (budget exceeded, wrapping dp.ErrBudgetExceeded) encrypts nothing
// and leaves the user free to try again with more budget.
func (u *User) EncryptMessages(update []float64) ([]*Message, error) {
	k := u.keys
	if err := u.checkUpdate(update); err != nil {
		return nil, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.sent {
		return nil, fmt.Errorf("dphe: user %d already encrypted its update for round %d", k.UserID, k.Round)
	}
	if _, err := u.privacy.Ledger.Charge(u.privacy.Principal, u.events...); err != nil {
		return nil, fmt.Errorf("dphe: user %d: refusing to contribute: %w", k.UserID, err)
	}
	released, err := u.privacy.release(update, u.laneCount(), u.noise)
	if err != nil {
		return nil, fmt.Errorf("dphe: user %d: %w", k.UserID, err)
	}
	return u.encryptLocked(released)
}

// laneCount is the number of coordinates per position: Packing.Lanes, or 1.
func (u *User) laneCount() int {
	if u.keys.Packing != nil {
		return u.keys.Packing.Lanes
	}
	return 1
}

// checkUpdate validates an update's length and values.
func (u *User) checkUpdate(update []float64) error {
	k := u.keys
	if len(update) != k.Coordinates() {
		return fmt.Errorf("dphe: user %d: update of length %d, round dimension is %d", k.UserID, len(update), k.Coordinates())
	}
	for i, x := range update {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Errorf("dphe: user %d: non-finite value at coordinate %d", k.UserID, i)
		}
	}
	return nil
}

// encryptLocked encrypts update exactly as given (the released, noisy
// update: EncryptMessages is the only caller outside tests) and marks the
// round as sent. u.mu is held.
func (u *User) encryptLocked(update []float64) ([]*Message, error) {
	k := u.keys
	if err := u.checkUpdate(update); err != nil {
		return nil, err
	}
	// Step 3: decompose w into support K and values v (per block when packed).
	support, plain, err := u.encodeUpdate(update)
	if err != nil {
		return nil, err
	}
	rng, err := newStream(u.random)
	if err != nil {
		return nil, err
	}
	// The checksum coefficients α_j of the support, in support order.
	alphas := make([]*big.Int, len(support))
	coeffs := newCoefficients(k.ChecksumKey)
	for j, si := 0, 0; si < len(support); j++ {
		if uint32(j) == support[si] {
			alphas[si] = coeffs.next(new(big.Int))
			si++
		} else {
			coeffs.skip()
		}
	}
	// Shard: random assignment of non-zeros to ⌈nz/M⌉ shards of at most M.
	rng.Shuffle(len(support), func(i, j int) {
		support[i], support[j] = support[j], support[i]
		alphas[i], alphas[j] = alphas[j], alphas[i]
		plain[i], plain[j] = plain[j], plain[i]
	})
	shards := max(1, (len(support)+k.Capacity-1)/k.Capacity)
	shares, err := u.checksumShares(shards)
	if err != nil {
		return nil, err
	}
	n := k.PublicKey.N()
	msgs := make([]*Message, shards)
	fpr := k.PublicKey.Fingerprint()
	for f := 0; f < shards; f++ {
		lo, hi := f*k.Capacity, min((f+1)*k.Capacity, len(support))
		if lo > hi {
			lo = hi
		}
		own := support[lo:hi]
		entries := u.shardEntries(own, plain[lo:hi], rng)
		// This shard's checksum: its share of t plus Σ α_j·m_j over its own
		// non-zeros (the padding encrypts zeros and adds nothing).
		checksum := shares[f]
		for i := range own {
			checksum.Add(checksum, new(big.Int).Mul(plain[lo+i], alphas[lo+i]))
		}
		checksum.Mod(checksum, n)
		plain := make([]*big.Int, len(entries), len(entries)+1)
		idx := make([]uint32, len(entries))
		for i, e := range entries {
			idx[i], plain[i] = e.pos, e.m
		}
		var progress paillier.Progress
		if u.progress != nil {
			base, total := f*(k.Capacity+1), shards*(k.Capacity+1)
			progress = func(done, _ int) { u.progress(base+done, total) }
		}
		cts, err := u.enc.EncryptVectorProgress(append(plain, checksum), progress)
		if err != nil {
			return nil, fmt.Errorf("dphe: user %d: encrypting shard %d: %w", k.UserID, f, err)
		}
		m := &Message{KeyFingerprint: fpr, Round: k.Round, UserID: k.UserID, Shard: uint32(f), Shards: uint32(shards),
			Dim: uint32(k.Dim), Indices: idx, Ciphertexts: cts[:len(entries)], Checksum: cts[len(entries)]}
		body := m.body(k.PublicKey)
		m.Tag = contributionTag(k.TagKey, fpr, k.Round, k.UserID, m.Shard, m.Shards, digestBody(body))
		m.MAC = computeMAC(k.MACKey, macInput(body, m.Tag))
		msgs[f] = m
	}
	u.sent = true
	return msgs, nil
}

// checksumShares splits the user's checksum offset t into one additive
// share per shard (uniform in [0, n) except the last, which completes the
// sum), so dropping or repeating a shard breaks the checksum.
func (u *User) checksumShares(shards int) ([]*big.Int, error) {
	n := u.keys.PublicKey.N()
	shares := make([]*big.Int, shards)
	last := new(big.Int).Set(u.keys.ChecksumOffset)
	for f := 0; f < shards-1; f++ {
		s, err := rand.Int(u.random, n)
		if err != nil {
			return nil, fmt.Errorf("dphe: user %d: drawing checksum shares: %w", u.keys.UserID, err)
		}
		shares[f] = s
		last.Sub(last, s)
	}
	shares[shards-1] = last.Mod(last, n)
	return shares, nil
}

type entry struct {
	pos uint32
	m   *big.Int
}

// shardEntries pads one shard's support (with its plaintexts) to M
// positions with zeros at uniformly random unused positions, applies
// Φ = φ⁽ⁿ⁾∘φ and sorts by the permuted position so that neither order nor
// count reveals the support.
func (u *User) shardEntries(own []uint32, plain []*big.Int, rng interface{ IntN(int) int }) []entry {
	k := u.keys
	inShard := make([]bool, k.Dim)
	for _, i := range own {
		inShard[i] = true
	}
	entries := make([]entry, 0, k.Capacity)
	for i, j := range own {
		entries = append(entries, entry{pos: k.PhiUser[k.Phi[j]], m: plain[i]})
	}
	if pad := k.Capacity - len(own); pad > 0 {
		free := make([]uint32, 0, k.Dim-len(own))
		for i := 0; i < k.Dim; i++ {
			if !inShard[i] {
				free = append(free, uint32(i))
			}
		}
		for j := 0; j < pad; j++ { // partial Fisher–Yates
			r := j + rng.IntN(len(free)-j)
			free[j], free[r] = free[r], free[j]
			entries = append(entries, entry{pos: k.PhiUser[k.Phi[free[j]]], m: big.NewInt(0)})
		}
	}
	slices.SortFunc(entries, func(a, b entry) int { return int(a.pos) - int(b.pos) })
	return entries
}

// encodeUpdate returns the positions of a released update that are not
// zero (coordinates, or blocks when the round packs) in increasing order,
// and their plaintexts.
func (u *User) encodeUpdate(update []float64) ([]uint32, []*big.Int, error) {
	k := u.keys
	var (
		support []uint32
		plain   []*big.Int
	)
	if k.Packing == nil {
		for i, x := range update {
			if x == 0 {
				continue
			}
			m, err := u.fp.Encode(x)
			if err != nil {
				return nil, nil, fmt.Errorf("dphe: user %d: coordinate %d: %w", k.UserID, i, err)
			}
			support, plain = append(support, uint32(i)), append(plain, m)
		}
		return support, plain, nil
	}
	lanes := k.Packing.Lanes
	for b := 0; b < k.Dim; b++ {
		block := update[b*lanes : min((b+1)*lanes, len(update))]
		if !slices.ContainsFunc(block, func(x float64) bool { return x != 0 }) {
			continue
		}
		m, err := k.Packing.pack(k.PublicKey, k.FracBits, block)
		if err != nil {
			return nil, nil, fmt.Errorf("dphe: user %d: block %d: %w", k.UserID, b, err)
		}
		support, plain = append(support, uint32(b)), append(plain, m)
	}
	return support, plain, nil
}
