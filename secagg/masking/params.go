package masking

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
)

// Limits on a round, so that every decoder can bound what it allocates.
const (
	// MaxClients is the largest roster.
	MaxClients = 1 << 16
	// MaxLength is the longest masked vector (2^26 values, 256 MiB).
	MaxLength = 1 << 26
	// maxSignature bounds a key advertisement's signature (ECDSA P-521
	// DER is ≤ 139 bytes, RSA-4096 is 512).
	maxSignature = 1024
)

// Params are the public parameters of one round, chosen by the coordinator
// and sent to every client (Encode/DecodeParams). A client checks them
// against its own policy (ClientConfig.MinThreshold) before taking part.
type Params struct {
	// RoundID names the round; it enters every signature, key derivation
	// and AEAD, so nothing from one round is accepted in another. Use 32
	// fresh random bytes per round.
	RoundID [32]byte
	// Roster lists the round's client ids, strictly ascending, each below
	// 2^32 − 1.
	Roster []uint32
	// Degree is k, the number of neighbours of each client in the
	// communication graph (SecAgg+: about log₂ n plus a margin). A degree
	// of n − 1 or more makes the complete graph (SecAgg). An odd degree on
	// an odd roster is raised by one (a k-regular graph needs nk even).
	Degree int
	// Threshold is t, the Shamir threshold: a client's secrets are shared
	// among its k neighbours and itself, and any t of them reconstruct.
	// It must satisfy 2t > k + 1 (so the coordinator cannot obtain t shares
	// of both secrets of one client from two disjoint groups of honest
	// holders) and t ≤ k + 1. No round with fewer than t survivors is
	// unmasked.
	Threshold int
	// Length is the number of values in Z_(2^32) each client sends.
	Length int
	// GraphSeed chooses the graph (see NewGraph).
	GraphSeed [32]byte
	// Context binds everything else the round's clients must agree on
	// and that these parameters do not hold: the caller's digest of its
	// own round configuration (the federation's is secround.ConfigDigest:
	// the quantiser, the distributed DP plan, the roster's names). It
	// enters Digest, which every key advertisement signs, so two clients
	// given different contexts refuse each other's advertisements
	// (ErrParamsMismatch). Zero when the caller has nothing to bind.
	Context [32]byte
}

// EffectiveDegree returns the graph's degree after the adjustments
// described at Params.Degree.
func (p *Params) EffectiveDegree() int {
	n := len(p.Roster)
	k := p.Degree
	if k >= n-1 {
		return n - 1
	}
	if k%2 == 1 && n%2 == 1 {
		k++
	}
	return k
}

// Validate reports whether the parameters make a sound round.
func (p *Params) Validate() error {
	n := len(p.Roster)
	if n < 3 || n > MaxClients {
		return fmt.Errorf("masking: a round needs 3 to %d clients, got %d", MaxClients, n)
	}
	for i, id := range p.Roster {
		if id == math.MaxUint32 {
			return errors.New("masking: client id 2^32 − 1 is reserved")
		}
		if i > 0 && id <= p.Roster[i-1] {
			return fmt.Errorf("masking: the roster must be strictly ascending, got %d after %d", id, p.Roster[i-1])
		}
	}
	if p.Degree < 2 {
		return fmt.Errorf("masking: the graph degree must be at least 2, got %d", p.Degree)
	}
	k := p.EffectiveDegree()
	t := p.Threshold
	if t < 2 || t > k+1 {
		return fmt.Errorf("masking: the threshold must be in [2, k+1 = %d], got %d", k+1, t)
	}
	if 2*t <= k+1 {
		return fmt.Errorf("masking: the threshold %d must exceed half of the k+1 = %d holders of each secret", t, k+1)
	}
	if p.Length < 1 || p.Length > MaxLength {
		return fmt.Errorf("masking: the vector length must be in [1, %d], got %d", MaxLength, p.Length)
	}
	return nil
}

// inRoster reports whether id takes part in the round.
func (p *Params) inRoster(id uint32) bool {
	lo, hi := 0, len(p.Roster)
	for lo < hi {
		m := (lo + hi) / 2
		switch {
		case p.Roster[m] == id:
			return true
		case p.Roster[m] < id:
			lo = m + 1
		default:
			hi = m
		}
	}
	return false
}

// Digest returns SHA-256 of the parameters' encoding (Context included).
// Key advertisements carry and sign it, so the parties of a round agree on
// its parameters and on whatever the caller bound in Context.
func (p *Params) Digest() ([32]byte, error) {
	b, err := p.MarshalBinary()
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(b), nil
}

// ToleratedColluders returns the number c of a client's neighbours that
// may collude with the coordinator (handing it both kinds of share)
// without the coordinator learning that client's input: the largest c
// with c < t and 2(t − c) > k + 1 − c, i.e. c ≤ 2t − k − 2. It is
// negative when even an honest set of holders is not enough, which
// Validate rules out.
func (p *Params) ToleratedColluders() int {
	k, t := p.EffectiveDegree(), p.Threshold
	return min(2*t-k-2, t-1)
}
