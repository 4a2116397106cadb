// Package secaggbench measures Veil's secure-aggregation schemes in one
// process, without a network: masking secure aggregation (secagg/masking
// over secagg/quant's encoding) and DPHE (secagg/dphe, dense, sparse and
// packed), per client and per round. It is the library behind veil bench
// secagg and veil bench dphe; the commands only read flags and print.
//
// Times are processor seconds of this process (internal/cputime) unless a
// field says wall: on a shared machine they are what one core spends.
// Benchmarks measure; nothing here asserts a time.
package secaggbench

import (
	"crypto/ed25519"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"time"

	"github.com/veil-privacy/veil/internal/cputime"
	"github.com/veil-privacy/veil/secagg/masking"
	"github.com/veil-privacy/veil/secagg/quant"
)

// MaskingParams configure one measured masking round.
type MaskingParams struct {
	// Clients n, Degree k (SecAgg+: about log₂ n), Threshold t.
	Clients, Degree, Threshold int
	// Length is the update's dimension (the head: 557,824).
	Length int
	// Dropped clients share their keys and then send nothing (the server
	// recovers their pairwise masks).
	Dropped int
	// Sample is how many clients' work is timed (the others run untimed,
	// sending one shared encoding); at least 1.
	Sample int
	// Quant is the encoding (Dim and Clients are set from the fields above).
	Quant quant.Config
	// Seed drives everything but the timing (keys, rotation, inputs).
	Seed uint64
	// Status, if not nil, is told each step.
	Status func(format string, args ...any)
}

// MaskingReport is one masking round's cost.
type MaskingReport struct {
	Clients            int `json:"clients"`
	Degree             int `json:"degree"`
	Threshold          int `json:"threshold"`
	ToleratedColluders int `json:"tolerated_colluders"`
	Dropped            int `json:"dropped"`
	Length             int `json:"length"`
	Padded             int `json:"padded"`
	Bits               int `json:"bits"`
	Sampled            int `json:"clients_timed"`
	// Per client, mean over the timed clients: quantisation (clip,
	// rotation, rounding, noise), the protocol (keys, shares, masking,
	// unmasking answer), and bytes sent against a float32 plaintext.
	ClientEncodeCPUS   float64 `json:"client_encode_cpu_s"`
	ClientProtocolCPUS float64 `json:"client_protocol_cpu_s"`
	ClientCPUS         float64 `json:"client_cpu_s"`
	ClientBytes        int     `json:"client_bytes_sent"`
	PlaintextBytes     int     `json:"plaintext_bytes"`
	BytesRatio         float64 `json:"bytes_vs_plaintext"`
	// The server: unmasking (reconstruction, mask expansion, sum) and
	// decoding the sum, and every byte it received.
	ServerUnmaskCPUS float64 `json:"server_unmask_cpu_s"`
	ServerDecodeCPUS float64 `json:"server_decode_cpu_s"`
	ServerBytes      int     `json:"server_bytes_received"`
	WallS            float64 `json:"wall_s"`
}

// maskingRound is the state of a round being measured.
type maskingRound struct {
	p       MaskingParams
	mp      masking.Params
	r       io.Reader
	signers map[uint32]ed25519.PrivateKey
	keys    masking.StaticKeys
	srv     *masking.Server
	clients map[uint32]*masking.Client
	rep     *MaskingReport
	cpu     map[uint32]time.Duration // protocol CPU of timed clients
	timed   map[uint32]bool
	// timedBytes are the bytes the timed clients sent.
	timedBytes int
}

// RunMasking plays one masking round of p.Clients clients and returns its
// measured cost.
func RunMasking(p MaskingParams) (*MaskingReport, error) {
	m, err := newMaskingRound(p)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	q, inputs, err := m.encode()
	if err != nil {
		return nil, err
	}
	if err := m.keysAndShares(); err != nil {
		return nil, err
	}
	if err := m.mask(inputs); err != nil {
		return nil, err
	}
	if err := m.unmask(q, inputs); err != nil {
		return nil, err
	}
	m.rep.WallS = time.Since(t0).Seconds()
	for _, d := range m.cpu {
		m.rep.ClientProtocolCPUS += d.Seconds() / float64(len(m.cpu))
	}
	m.rep.ClientCPUS = m.rep.ClientEncodeCPUS + m.rep.ClientProtocolCPUS
	m.rep.ClientBytes = m.timedBytes / m.p.Sample
	m.rep.BytesRatio = float64(m.rep.ClientBytes) / float64(m.rep.PlaintextBytes)
	return m.rep, nil
}

func newMaskingRound(p MaskingParams) (*maskingRound, error) {
	if p.Sample < 1 || p.Dropped < 0 || p.Dropped > p.Clients-p.Threshold || p.Sample > p.Clients-p.Dropped {
		return nil, fmt.Errorf("secaggbench: %d clients with %d dropped, threshold %d, %d timed: inconsistent", p.Clients, p.Dropped, p.Threshold, p.Sample)
	}
	r := rand.NewChaCha8(seed32(p.Seed))
	mp := masking.Params{Degree: p.Degree, Threshold: p.Threshold, Length: 0}
	_, _ = r.Read(mp.RoundID[:])
	_, _ = r.Read(mp.GraphSeed[:])
	m := &maskingRound{p: p, r: r, signers: map[uint32]ed25519.PrivateKey{}, keys: masking.StaticKeys{}, clients: map[uint32]*masking.Client{},
		cpu: map[uint32]time.Duration{}, timed: map[uint32]bool{}}
	for i := range p.Clients {
		id := uint32(i + 1)
		var s [32]byte
		_, _ = r.Read(s[:])
		m.signers[id] = ed25519.NewKeyFromSeed(s[:])
		m.keys[id] = m.signers[id].Public()
		mp.Roster = append(mp.Roster, id)
		m.timed[id] = i < p.Sample
	}
	m.mp = mp
	m.rep = &MaskingReport{Clients: p.Clients, Threshold: p.Threshold, Dropped: p.Dropped, Length: p.Length, Bits: p.Quant.Bits,
		Sampled: p.Sample, PlaintextBytes: 4 * p.Length}
	return m, nil
}

func seed32(s uint64) [32]byte {
	var b [32]byte
	for i := range 8 {
		b[i] = byte(s >> (8 * i))
	}
	return b
}

func (m *maskingRound) status(format string, args ...any) {
	if m.p.Status != nil {
		m.p.Status(format, args...)
	}
}

// timed runs f and adds its processor time to id's if id is timed.
func (m *maskingRound) timed1(id uint32, f func() error) error {
	if !m.timed[id] {
		return f()
	}
	c0 := cputime.Process()
	err := f()
	m.cpu[id] += cputime.Process() - c0
	return err
}

// sent adds a message's size to the client's bytes (mean over the timed
// clients) and to the server's.
func (m *maskingRound) sent(id uint32, n int) {
	m.rep.ServerBytes += n
	if m.timed[id] {
		m.timedBytes += n
	}
}

// encode builds the quantiser and the clients' encoded inputs: each timed
// client encodes its own update, the others send the first encoding.
func (m *maskingRound) encode() (*quant.Quantizer, map[uint32][]uint32, error) {
	cfg := m.p.Quant
	cfg.Dim, cfg.Clients = m.p.Length, m.p.Clients
	q, err := quant.New(cfg, quant.RotationSeed(m.mp.RoundID))
	if err != nil {
		return nil, nil, fmt.Errorf("secaggbench: %w", err)
	}
	m.mp.Length, m.rep.Padded = q.Padded(), q.Padded()
	if err := m.mp.Validate(); err != nil {
		return nil, nil, fmt.Errorf("secaggbench: %w", err)
	}
	m.rep.Degree, m.rep.ToleratedColluders = m.mp.EffectiveDegree(), m.mp.ToleratedColluders()
	if m.srv, err = masking.NewServer(m.mp, m.keys); err != nil {
		return nil, nil, fmt.Errorf("secaggbench: %w", err)
	}
	rng := rand.New(rand.NewPCG(m.p.Seed, 7))
	inputs := map[uint32][]uint32{}
	for _, id := range m.mp.Roster[:m.p.Sample] {
		m.status("client %d: quantising %d values (clip, rotation, rounding, noise)", id, m.p.Length)
		x := make([]float32, m.p.Length)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * 2 / math.Sqrt(float64(m.p.Length)))
		}
		c0 := cputime.Process()
		if inputs[id], err = q.Encode(x, m.r); err != nil {
			return nil, nil, fmt.Errorf("secaggbench: %w", err)
		}
		m.rep.ClientEncodeCPUS += (cputime.Process() - c0).Seconds() / float64(m.p.Sample)
	}
	for _, id := range m.mp.Roster[m.p.Sample:] {
		inputs[id] = inputs[m.mp.Roster[0]]
	}
	return q, inputs, nil
}

// keysAndShares runs the advertisement and sharing steps of every client.
func (m *maskingRound) keysAndShares() error {
	m.status("%d clients: keys and signed advertisements, then Shamir shares (k = %d, t = %d)", m.p.Clients, m.mp.EffectiveDegree(), m.p.Threshold)
	for _, id := range m.mp.Roster {
		var ad *masking.KeyAdvert
		err := m.timed1(id, func() (err error) {
			m.clients[id], ad, err = masking.NewClient(masking.ClientConfig{ID: id, Signer: m.signers[id], Keys: m.keys}, m.mp, m.r)
			return err
		})
		if err != nil {
			return fmt.Errorf("secaggbench: %w", err)
		}
		b, err := ad.MarshalBinary()
		if err != nil {
			return err
		}
		m.sent(id, len(b))
		if err := m.srv.ReceiveAdvert(ad); err != nil {
			return fmt.Errorf("secaggbench: %w", err)
		}
	}
	for _, id := range m.mp.Roster {
		ads, err := m.srv.AdvertsFor(id)
		if err != nil {
			return fmt.Errorf("secaggbench: %w", err)
		}
		var sh []masking.EncryptedShare
		if err := m.timed1(id, func() (err error) { sh, err = m.clients[id].ShareKeys(ads, m.r); return err }); err != nil {
			return fmt.Errorf("secaggbench: %w", err)
		}
		b, err := masking.EncodeShares(m.mp.RoundID, sh)
		if err != nil {
			return err
		}
		m.sent(id, len(b))
		if err := m.srv.ReceiveShares(id, sh); err != nil {
			return fmt.Errorf("secaggbench: %w", err)
		}
	}
	return nil
}

// survivors are the clients that send their masked input (the last
// Dropped clients drop out after sharing).
func (m *maskingRound) survivors() []uint32 { return m.mp.Roster[:m.p.Clients-m.p.Dropped] }

// mask has every survivor mask its input.
func (m *maskingRound) mask(inputs map[uint32][]uint32) error {
	m.status("%d clients: masking %d values each (%d drop out)", len(m.survivors()), m.mp.Length, m.p.Dropped)
	for _, id := range m.survivors() {
		sh, err := m.srv.SharesFor(id)
		if err != nil {
			return fmt.Errorf("secaggbench: %w", err)
		}
		var mi *masking.MaskedInput
		if err := m.timed1(id, func() (err error) { mi, err = m.clients[id].MaskInput(sh, inputs[id]); return err }); err != nil {
			return fmt.Errorf("secaggbench: %w", err)
		}
		b, err := mi.MarshalBinary()
		if err != nil {
			return err
		}
		m.sent(id, len(b))
		if err := m.srv.ReceiveMasked(mi); err != nil {
			return fmt.Errorf("secaggbench: %w", err)
		}
	}
	return nil
}

// unmask runs the unmasking answers, the server's sum and the decoding.
func (m *maskingRound) unmask(q *quant.Quantizer, inputs map[uint32][]uint32) error {
	req, err := m.srv.UnmaskRequest()
	if err != nil {
		return fmt.Errorf("secaggbench: %w", err)
	}
	for _, id := range req.Survivors {
		var resp *masking.UnmaskResponse
		if err := m.timed1(id, func() (err error) { resp, err = m.clients[id].Unmask(req); return err }); err != nil {
			return fmt.Errorf("secaggbench: %w", err)
		}
		b, err := resp.MarshalBinary()
		if err != nil {
			return err
		}
		m.sent(id, len(b))
		if err := m.srv.ReceiveUnmask(resp); err != nil {
			return fmt.Errorf("secaggbench: %w", err)
		}
	}
	m.status("server: unmasking the sum of %d survivors", len(req.Survivors))
	c0 := cputime.Process()
	res, err := m.srv.Sum()
	if err != nil {
		return fmt.Errorf("secaggbench: %w", err)
	}
	m.rep.ServerUnmaskCPUS = (cputime.Process() - c0).Seconds()
	if err := checkSum(res.Sum, req.Survivors, inputs); err != nil {
		return err
	}
	c0 = cputime.Process()
	if _, err := q.Decode(res.Sum); err != nil {
		return fmt.Errorf("secaggbench: %w", err)
	}
	m.rep.ServerDecodeCPUS = (cputime.Process() - c0).Seconds()
	return nil
}

// checkSum checks the unmasked sum against the survivors' inputs, mod 2^32.
func checkSum(sum []uint32, survivors []uint32, inputs map[uint32][]uint32) error {
	want := make([]uint32, len(sum))
	for _, id := range survivors {
		for i, v := range inputs[id] {
			want[i] += v
		}
	}
	for i := range want {
		if want[i] != sum[i] {
			return fmt.Errorf("secaggbench: the unmasked sum is wrong at value %d", i)
		}
	}
	return nil
}

// Graph returns the SecAgg+-style choice for n clients that veil bench
// secagg measures: degree k = min(n − 1, 2⌈log₂ n⌉) and threshold
// t = ⌊2(k + 1)/3⌋ + 1, so that 2t > k + 1, each client's secrets survive
// the loss of k + 1 − t of their k + 1 holders, and the coordinator
// learns nothing while it colludes with at most 2t − k − 2 of a client's
// neighbours (masking.Params.ToleratedColluders).
func Graph(n int) (k, t int) {
	k = min(n-1, 2*bitsLen(n-1))
	return k, 2*(k+1)/3 + 1
}

// bitsLen is ⌈log₂(x+1)⌉ for x ≥ 0.
func bitsLen(x int) int {
	n := 0
	for ; x > 0; x >>= 1 {
		n++
	}
	return n
}
