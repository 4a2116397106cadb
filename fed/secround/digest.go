package secround

import (
	"crypto/sha256"
	"encoding/binary"
	"math"

	"github.com/veil-privacy/veil/fed/fedpb"
)

// configLabel starts the canonical encoding ConfigDigest hashes; a change
// of the encoding changes the label.
const configLabel = "veil/fed/secround/v1 secure aggregation configuration\x00"

// ConfigDigest returns SHA-256 of the canonical encoding of a round's
// complete secure aggregation section: its mode, round id, roster (ids
// and certificate names, in order), graph degree and seed, threshold,
// masked length, quantiser, T (min_honest), phase deadlines and
// distributed DP-SGD plan, every field of every message. Params puts it
// in masking.Params.Context, so each client's key advert signs it and a
// client refuses a neighbour's advert made under any other (see the
// package comment). Two configurations have the same digest only if
// every field is equal bit for bit (floating-point values by their
// IEEE-754 bits; a message that is absent differs from one that is
// present and empty). Fields the decoder did not know (unknown fields)
// are not covered: no client reads them.
func ConfigDigest(cfg *fedpb.SecAggConfig) [32]byte {
	return sha256.Sum256(appendConfig([]byte(configLabel), cfg))
}

// appendConfig appends cfg's canonical encoding: fixed-width big-endian
// integers, float64 bits, strings and bytes prefixed by their 32-bit
// length, lists by their 32-bit count, optional messages by a presence
// byte, in the order of the fields' numbers. Every field has a fixed
// place, so the encoding is injective.
func appendConfig(b []byte, cfg *fedpb.SecAggConfig) []byte {
	e := encoder{b}
	e.str(cfg.GetMode())
	e.bytes(cfg.GetRoundId())
	e.u32(uint32(len(cfg.GetRoster())))
	for _, m := range cfg.GetRoster() {
		e.u32(m.GetId())
		e.str(m.GetClient())
	}
	e.u32(cfg.GetDegree())
	e.u32(cfg.GetThreshold())
	e.u32(cfg.GetLength())
	e.bytes(cfg.GetGraphSeed())
	if e.present(cfg.GetQuant() != nil) {
		q := cfg.GetQuant()
		e.u32(q.GetDim())
		e.u32(q.GetBlock())
		e.f64(q.GetClip())
		e.f64(q.GetGamma())
		e.f64(q.GetBeta())
		e.u32(q.GetBits())
		e.u64(q.GetNoise())
		e.f64(q.GetWrapProb())
	}
	e.u32(cfg.GetMinHonest())
	e.u64(uint64(cfg.GetAdvertsDeadlineUnixMs()))
	e.u64(uint64(cfg.GetSharesDeadlineUnixMs()))
	e.u64(uint64(cfg.GetMaskedDeadlineUnixMs()))
	if e.present(cfg.GetDdp() != nil) {
		p := cfg.GetDdp()
		e.str(p.GetUnit())
		e.f64(p.GetDelta())
		e.f64(p.GetClip())
		e.f64(p.GetSamplingRate())
		e.u32(p.GetRounds())
		e.u32(p.GetClients())
		e.u32(p.GetThreshold())
		e.u64(p.GetNoise())
		e.u32(p.GetDim())
		e.u32(p.GetBlock())
		e.f64(p.GetScale())
		e.f64(p.GetSumClip())
		e.u32(p.GetBits())
		e.f64(p.GetWrapProb())
		e.f64(p.GetExpectedBatch())
	}
	return e.b
}

type encoder struct{ b []byte }

func (e *encoder) u32(v uint32)   { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *encoder) u64(v uint64)   { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *encoder) f64(v float64)  { e.u64(math.Float64bits(v)) }
func (e *encoder) str(s string)   { e.bytes([]byte(s)) }
func (e *encoder) bytes(p []byte) { e.u32(uint32(len(p))); e.b = append(e.b, p...) }

// present appends whether an optional message follows and returns it.
func (e *encoder) present(ok bool) bool {
	if ok {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
	return ok
}
