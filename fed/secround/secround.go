// Package secround holds what a coordinator and a client both need of a
// securely aggregated round (fedpb.SecAggConfig): its masking parameters,
// its quantiser, and the certificate directory a client checks its
// neighbours' key adverts against. Neither side trusts the other to have
// checked them.
//
// # One configuration per round
//
// Each client checks the round's configuration against its own owner's
// policy, but a check of one's own copy says nothing about the copies the
// coordinator sent the others: a coordinator could tell one client that
// the distributed DP-SGD plan's noise share is twice what it tells the
// rest, so that client charges its ledger for noise the sum does not
// carry; or give clients different T, clip, sampling rate, rounds,
// quantiser, modulus, roster or graph; or serve one client other weights
// than the rest (without DP, a model crafted for one client could make
// its update stand out in the sum). So the masking parameters bind the
// whole configuration and the model: Params sets masking.Params.Context
// to RoundContext, SHA-256 of ConfigDigest (SHA-256 of the canonical
// encoding of every field of the section: the masking parameters, the
// quantiser, T, the distributed DP-SGD plan, the round id, the roster's
// ids and names, the graph's degree and seed, the phase deadlines) and of
// the model's digest (ModelDigest): a client passes the one it computes
// over the weights it received and trains from, the coordinator the
// version it serves. Each key advert carries and is signed over the digest
// of the parameters (Context included) by the client's certificate key,
// and a client refuses, before it sends its shares, any neighbour's advert
// made under another digest (masking.ErrParamsMismatch) or not signed over
// its own. The fed client charges its ledger only after that check and
// after the relayed shares check out (masking.Client.CheckShares), so a
// refused round costs it nothing and it has sent nothing but its advert.
//
// The guarantee: the masked inputs whose masks cancel together (every
// input in a sum the coordinator can unmask is masked with its verified
// neighbours only) were all computed under one configuration and from one
// model, byte for byte, so a sum that contains an honest client's input carries at least
// the noise of the plan that client accepted, from every honest client in
// it. A coordinator that equivocates can still drop clients (each group
// it isolates is a round of its own, which the threshold t, at least the
// plan's threshold, keeps to t survivors or nothing) or make the round
// fail; it cannot make a client believe in noise that others do not add.
// It assumes what masking assumes: an honest authority (each id's
// advert is checked against the certificate of the roster's name for it)
// and at most Params.ToleratedColluders colluding neighbours. The model
// is bound, not judged: one malicious model sent to every client is what
// DP's noise is for.
//
// # The graph's seed
//
// graph_seed is the coordinator's, picked after it chose the roster: with
// a sparse graph it could try seeds until a target's neighbours are all
// clients it controls. The fed client therefore takes part only where the
// seed cannot matter to it (masking.Params.SeedIndependent for the n − T
// clients its owner's T leaves possibly colluding: the complete graph, or
// one that tolerates that many colluders wherever they sit), unless its
// owner opts into sparse graphs. Making a sparse graph's seed unbiasable
// needs one more exchange than the protocol has: each client commits to a
// random contribution in its advert, the coordinator relays the set of
// commitments, each client reveals its contribution signed over the set's
// digest, and the seed is the hash of every roster client's reveal, a
// missing reveal failing the round. See docs/privacy.md.
package secround

import (
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/secagg/masking"
	"github.com/veil-privacy/veil/secagg/quant"
)

// Masking is the mode of SecAgg+ masking (secagg/masking).
const Masking = "masking"

// Params returns the masking parameters of a round's secure aggregation
// section, checked (masking.Params.Validate, names that can name a
// certificate, ids unique), with the whole section and the digest of the
// round's model bound in Context (RoundContext): the key adverts of the
// round sign them. model is ModelDigest of the model version the caller
// trains from (a client: computed over the bytes it received) or serves
// (the coordinator).
func Params(cfg *fedpb.SecAggConfig, model [32]byte) (masking.Params, error) {
	var p masking.Params
	if cfg.GetMode() != Masking {
		return p, fmt.Errorf("secure aggregation mode %q, not %s", cfg.GetMode(), Masking)
	}
	if len(cfg.GetRoundId()) != 32 || len(cfg.GetGraphSeed()) != 32 {
		return p, errors.New("the round id and graph seed must be 32 bytes")
	}
	p.RoundID, p.GraphSeed = [32]byte(cfg.GetRoundId()), [32]byte(cfg.GetGraphSeed())
	names := map[string]bool{}
	for _, mb := range cfg.GetRoster() {
		if err := pki.CheckName(mb.GetClient()); err != nil {
			return p, fmt.Errorf("the roster: %w", err)
		}
		if names[mb.GetClient()] {
			return p, fmt.Errorf("the roster names %q twice", mb.GetClient())
		}
		names[mb.GetClient()] = true
		p.Roster = append(p.Roster, mb.GetId())
	}
	p.Degree, p.Threshold, p.Length = int(cfg.GetDegree()), int(cfg.GetThreshold()), int(cfg.GetLength())
	p.Context = RoundContext(cfg, model)
	if err := p.Validate(); err != nil {
		return p, err
	}
	return p, nil
}

// Quantizer returns the round's quantiser with per-client noise σ = noise
// (lattice units), checking that the sum of the roster's encodings at that
// noise cannot wrap (quant.New) and that its padded length is the masked
// length.
func Quantizer(cfg *fedpb.SecAggConfig, noise uint64) (*quant.Quantizer, error) {
	if len(cfg.GetRoundId()) != 32 {
		return nil, fmt.Errorf("the round id has %d bytes, not 32", len(cfg.GetRoundId()))
	}
	qc := cfg.GetQuant()
	q, err := quant.New(quant.Config{Dim: int(qc.GetDim()), Block: int(qc.GetBlock()), ClipNorm: qc.GetClip(), Gamma: qc.GetGamma(),
		Beta: qc.GetBeta(), Bits: int(qc.GetBits()), Noise: noise, Clients: len(cfg.GetRoster()), WrapProb: qc.GetWrapProb()},
		quant.RotationSeed([32]byte(cfg.GetRoundId())))
	if err != nil {
		return nil, err
	}
	if cfg.GetLength() != 0 && int(cfg.GetLength()) != q.Padded() {
		return nil, fmt.Errorf("the masked length %d is not the quantiser's %d", cfg.GetLength(), q.Padded())
	}
	return q, nil
}

// ID returns the masking id of client in the roster.
func ID(cfg *fedpb.SecAggConfig, client string) (uint32, bool) {
	for _, mb := range cfg.GetRoster() {
		if mb.GetClient() == client {
			return mb.GetId(), true
		}
	}
	return 0, false
}

// Directory is the key directory of a round's clients: the public keys of
// certificates that the authority (roots) issued for client
// authentication, with the client role, to the name the roster gives
// each id.
type Directory struct {
	names map[uint32]string
	roots *x509.CertPool
	keys  masking.StaticKeys
}

// NewDirectory returns an empty directory for cfg's roster.
func NewDirectory(cfg *fedpb.SecAggConfig, roots *x509.CertPool) *Directory {
	d := &Directory{names: map[uint32]string{}, roots: roots, keys: masking.StaticKeys{}}
	for _, mb := range cfg.GetRoster() {
		d.names[mb.GetId()] = mb.GetClient()
	}
	return d
}

// Check verifies leaf as id's certificate.
func (d *Directory) Check(id uint32, leaf *x509.Certificate) error {
	name, ok := d.names[id]
	if !ok {
		return fmt.Errorf("client id %d is not in the roster", id)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: d.roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("client %d's certificate: %w", id, err)
	}
	if leaf.Subject.CommonName != name || pki.RoleOf(leaf) != pki.Client {
		return fmt.Errorf("client %d's certificate is %q's (role %s), not the roster's client %q", id, leaf.Subject.CommonName, pki.RoleOf(leaf), name)
	}
	return nil
}

// Add verifies the certificate (DER) of id and keeps its key.
func (d *Directory) Add(id uint32, der []byte) error {
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return fmt.Errorf("client %d's certificate: %w", id, err)
	}
	if err := d.Check(id, leaf); err != nil {
		return err
	}
	d.keys[id] = leaf.PublicKey
	return nil
}

// PublicKey returns the key of id's verified certificate.
func (d *Directory) PublicKey(id uint32) (crypto.PublicKey, error) { return d.keys.PublicKey(id) }
