package dphe

import (
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/secagg/paillier"
)

// testPrivacy returns DP options with a budget no test exhausts, for the
// protocol tests (which check exact sums through encryptExact and so do
// not draw noise).
func testPrivacy(t testing.TB) *Privacy {
	t.Helper()
	return newTestPrivacy(t, 1, 1, 1e6, 1)
}

// newTestPrivacy returns Privacy{clip, σ} charged to a fresh ledger with
// budget ε at δ = 1e-5, its noise seeded by seed.
func newTestPrivacy(t testing.TB, clip, sigma, budget float64, seed byte) *Privacy {
	t.Helper()
	l, err := dp.NewLedger(dp.LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetBudget("user data", dp.Budget{Epsilon: budget, Delta: 1e-5}); err != nil {
		t.Fatal(err)
	}
	return &Privacy{Clip: clip, NoiseMultiplier: sigma, Ledger: l, Principal: "user data", Source: dp.NewSeededSource([32]byte{seed})}
}

// encryptExactMessages encrypts update as given, without the DP step. It
// plays a user who bypasses the API (a malicious or colluding user holds
// its keys and can encrypt anything) and lets the protocol tests check
// exact sums; an honest user has only EncryptMessages.
func (u *User) encryptExactMessages(update []float64) ([]*Message, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.sent {
		return nil, fmt.Errorf("dphe: user %d already encrypted its update for round %d", u.keys.UserID, u.keys.Round)
	}
	return u.encryptLocked(update)
}

func (u *User) encryptExact(update []float64) ([][]byte, error) {
	msgs, err := u.encryptExactMessages(update)
	if err != nil {
		return nil, err
	}
	return u.encode(msgs)
}

func (u *User) encryptExact32(update []float32) ([][]byte, error) {
	return u.encryptExact(widen(update))
}

// victimRound plays one round with two colluding users who send zeros
// (bypassing the DP step) and a victim who sends update through the
// public API with priv (or, exact, without noise: the old behaviour), and
// returns what the key generator decrypts.
func victimRound(t *testing.T, kg *KeyGenerator, round uint64, update []float64, priv *Privacy, exact bool) []float64 {
	t.Helper()
	dim := len(update)
	ids := []uint32{1, 2, 3}
	setup, err := kg.NewRound(RoundParams{Round: round, Dim: dim, Capacity: dim, Users: ids})
	if err != nil {
		t.Fatal(err)
	}
	agg, err := NewAggregator(setup.Aggregator, AggregatorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	enc := paillier.EncrypterOptions{Randomness: paillier.RandomnessShortExponent, ExponentBits: 256, PoolSize: 1}
	for _, id := range ids {
		p := testPrivacy(t)
		if id == 3 {
			p = priv
		}
		u, err := NewUser(setup.Users[id], UserOptions{Encrypter: enc, Privacy: p})
		if err != nil {
			t.Fatal(err)
		}
		var msgs [][]byte
		switch {
		case id != 3:
			msgs, err = u.encryptExact(make([]float64, dim)) // the colluders' zeros
		case exact:
			msgs, err = u.encryptExact(update)
		default:
			msgs, err = u.Encrypt(update)
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if err := agg.Receive(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	sum, err := agg.Sum()
	if err != nil {
		t.Fatal(err)
	}
	res, err := kg.Decrypt(sum)
	if err != nil {
		t.Fatal(err)
	}
	return res.Sum
}

// TestColludersLearnOnlyNoisyUpdate plays the attack of issue 19 item 11:
// two users send zeros, so the key generator's decrypted sum of "at least
// three users" is the victim's contribution alone. Without the DP step it
// is the victim's update exactly; with it, the sum differs from the
// (clipped) update by noise of the stated standard deviation σ·C on every
// coordinate: its mean, variance and the share within one standard
// deviation match a Gaussian of that scale (tolerances of about five
// standard errors).
func TestColludersLearnOnlyNoisyUpdate(t *testing.T) {
	const dim = 512
	kg := newTestKeyGenerator(t, 4)
	rng := mrand.New(mrand.NewPCG(3, 4))
	update := make([]float64, dim)
	var ss float64
	for i := range update {
		update[i] = rng.NormFloat64()
		ss += update[i] * update[i]
	}
	// Without noise (the old API) the colluders read the update exactly.
	if got := victimRound(t, kg, 1, update, testPrivacy(t), true); !equalWithin(got, update, 1e-6) {
		t.Fatal("the attack does not even work without noise: the test cannot tell")
	}
	const clip, sigma = 2.0, 0.5
	got := victimRound(t, kg, 2, update, newTestPrivacy(t, clip, sigma, 100, 9), false)
	scale := clip / math.Sqrt(ss) // the update's norm is about √512 > clip
	var sum, sum2 float64
	within := 0
	sd := sigma * clip
	for i := range got {
		z := got[i] - update[i]*scale
		sum += z
		sum2 += z * z
		if math.Abs(z) <= sd {
			within++
		}
	}
	n := float64(dim)
	mean, variance := sum/n, sum2/n
	if math.Abs(mean) > 5*sd/math.Sqrt(n) {
		t.Errorf("noise mean %.4g, want 0 ± %.3g", mean, 5*sd/math.Sqrt(n))
	}
	if r := variance / (sd * sd); math.Abs(r-1) > 5*math.Sqrt(2/n) {
		t.Errorf("noise variance is %.3f × (σC)², want 1 ± %.3f", r, 5*math.Sqrt(2/n))
	}
	p := 0.6826894921370859
	if f := float64(within) / n; math.Abs(f-p) > 5*math.Sqrt(p*(1-p)/n) {
		t.Errorf("%.3f of the noise lies within one σC, want %.3f", f, p)
	}
	t.Logf("D = %d, σC = %g: noise mean %.4f, variance %.4f (want %.4f), %d of %d within σC", dim, sd, mean, variance, sd*sd, within, dim)
}

func equalWithin(a, b []float64, tol float64) bool {
	for i := range a {
		if math.Abs(a[i]-b[i]) > tol {
			return false
		}
	}
	return true
}

// TestColludersCannotTellVictimsUpdate: the colluders' best test between
// two candidate updates of the victim (0 and u with ‖u‖ = C) from the
// decrypted sum: the sign of ⟨sum, u⟩ − C²/2, the likelihood-ratio test of
// the Gaussian. At σ = 1 its accuracy is Φ(1/2) = 0.69 at best; without the
// DP step the same test is always right. 300 rounds: the accuracy must stay
// below 0.78 (0.69 + about 3.5 standard errors).
func TestColludersCannotTellVictimsUpdate(t *testing.T) {
	if testing.Short() {
		t.Skip("300 rounds of Paillier encryption")
	}
	const dim, rounds = 4, 300
	kg := newTestKeyGenerator(t, 4)
	u := []float64{0.6, 0, -0.8, 0}     // ‖u‖ = 1 = C
	guess := func(sum []float64) bool { // true: "the victim sent u"
		var dot float64
		for i := range sum {
			dot += sum[i] * u[i]
		}
		return dot > 0.5
	}
	exactRight := 0
	for r := range 20 {
		sent := r%2 == 0
		upd := make([]float64, dim)
		if sent {
			copy(upd, u)
		}
		if guess(victimRound(t, kg, uint64(1+r), upd, testPrivacy(t), true)) == sent {
			exactRight++
		}
	}
	if exactRight != 20 {
		t.Fatalf("without noise the test was right %d times of 20: it is not a working attack", exactRight)
	}
	right := 0
	priv := newTestPrivacy(t, 1, 1, 1e6, 5)
	pick := mrand.New(mrand.NewPCG(5, 6))
	for r := range rounds {
		sent := pick.IntN(2) == 0
		upd := make([]float64, dim)
		if sent {
			copy(upd, u)
		}
		if guess(victimRound(t, kg, uint64(100+r), upd, priv, false)) == sent {
			right++
		}
	}
	acc := float64(right) / rounds
	t.Logf("distinguishing accuracy with noise σC = 1: %.3f (Gaussian optimum 0.691; 1.000 without noise)", acc)
	if acc > 0.78 {
		t.Errorf("the colluders tell the victim's update apart in %.3f of rounds, above the Gaussian optimum 0.69 by far: the noise is not there", acc)
	}
}

// TestUserNeedsPrivacy: a user cannot be created without the DP step, or
// with options that would make it meaningless.
func TestUserNeedsPrivacy(t *testing.T) {
	kg := newTestKeyGenerator(t, 2)
	setup, err := kg.NewRound(RoundParams{Round: 1, Dim: 8, Capacity: 4, Users: []uint32{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	good := *testPrivacy(t)
	for _, c := range []struct {
		name string
		edit func(p *Privacy) *Privacy
		want string
	}{
		{"none", func(*Privacy) *Privacy { return nil }, "needs Privacy"},
		{"no clip", func(p *Privacy) *Privacy { p.Clip = 0; return p }, "clip"},
		{"NaN σ", func(p *Privacy) *Privacy { p.NoiseMultiplier = math.NaN(); return p }, "noise multiplier"},
		{"zero σ", func(p *Privacy) *Privacy { p.NoiseMultiplier = 0; return p }, "noise multiplier"},
		{"negative threshold", func(p *Privacy) *Privacy { p.Threshold = -1; return p }, "threshold"},
		{"no ledger", func(p *Privacy) *Privacy { p.Ledger = nil; return p }, "ledger"},
		{"unknown principal", func(p *Privacy) *Privacy { p.Principal = "someone else"; return p }, "someone else"},
	} {
		p := good
		_, err := NewUser(setup.Users[1], UserOptions{Privacy: c.edit(&p)})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v (want %q)", c.name, err, c.want)
		}
	}
}

// TestContributionChargedFirst: a contribution is charged before it is
// encrypted, a bad update is refused before the charge, and a contribution
// over budget is refused with the ledger unchanged and nothing encrypted.
func TestContributionChargedFirst(t *testing.T) {
	kg := newTestKeyGenerator(t, 4)
	const dim = 6
	probe := newTestPrivacy(t, 1, 2, 1e6, 1)
	ev, err := ContributionEvent(*probe, dim)
	if err != nil {
		t.Fatal(err)
	}
	one, err := probe.Ledger.Charge(probe.Principal, ev)
	if err != nil {
		t.Fatal(err)
	}
	// A budget for one contribution, not two (two compose to about √2
	// times one's ε by RDP).
	priv := newTestPrivacy(t, 1, 2, 1.2*one.Epsilon, 2)
	user := func(round uint64) *User {
		setup, err := kg.NewRound(RoundParams{Round: round, Dim: dim, Capacity: 3, Users: []uint32{1, 2, 3}})
		if err != nil {
			t.Fatal(err)
		}
		u, err := NewUser(setup.Users[1], UserOptions{Privacy: priv})
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	spent := func() float64 {
		s, err := priv.Ledger.(*dp.Ledger).Spent(priv.Principal)
		if err != nil {
			t.Fatal(err)
		}
		return s.Epsilon
	}
	u := user(1)
	if _, err := u.Encrypt([]float64{1, math.NaN(), 0, 0, 0, 0}); err == nil || spent() != 0 {
		t.Fatalf("NaN update: %v, spent %g", err, spent())
	}
	if _, err := u.Encrypt([]float64{1, 2}); err == nil || spent() != 0 {
		t.Fatalf("short update: %v, spent %g", err, spent())
	}
	if _, err := u.Encrypt([]float64{0.5, 0, 0, 0, 0, -0.5}); err != nil {
		t.Fatal(err)
	}
	if math.Abs(spent()-one.Epsilon) > 1e-12 {
		t.Fatalf("one contribution spent %g, want %g", spent(), one.Epsilon)
	}
	msgs, err := user(2).Encrypt([]float64{0.5, 0, 0, 0, 0, -0.5})
	if !errors.Is(err, dp.ErrBudgetExceeded) || msgs != nil {
		t.Fatalf("second contribution over budget: %v, %d messages", err, len(msgs))
	}
	if math.Abs(spent()-one.Epsilon) > 1e-12 {
		t.Fatalf("the refused contribution changed the ledger: %g", spent())
	}
}

// TestThresholdKeepsUpdatesSparse: with Threshold τ, a coordinate of pure
// noise is sent with probability 2Φ(−τ) (0.27% at 3), so DPHE's messages
// stay few; without it every coordinate carries noise.
func TestThresholdKeepsUpdatesSparse(t *testing.T) {
	const dim = 20000
	for _, c := range []struct {
		tau  float64
		want float64
	}{{0, 1}, {3, 2 * 0.0013498980316301}} {
		p := newTestPrivacy(t, 1, 1, 1e6, 3)
		p.Threshold = c.tau
		w, err := p.release(make([]float64, dim), 1, p.Source)
		if err != nil {
			t.Fatal(err)
		}
		nz := 0
		for _, x := range w {
			if x != 0 {
				nz++
			}
		}
		f := float64(nz) / dim
		if math.Abs(f-c.want) > 5*math.Sqrt(c.want*(1-c.want)/dim)+1e-4 {
			t.Errorf("τ = %g: %.4f of the coordinates sent, want %.4f", c.tau, f, c.want)
		}
	}
}
