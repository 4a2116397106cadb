package secround_test

import (
	"bytes"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/secround"
)

// FuzzSecAggConfig feeds a client's checks of a round's secure
// aggregation section arbitrary bytes, as a hostile coordinator could
// send them: Params, Quantizer and the directory must refuse or accept
// without panicking, what Params accepts is a valid masking round bound
// to the configuration's digest, and the digest survives re-encoding.
func FuzzSecAggConfig(f *testing.F) {
	good := &fedpb.SecAggConfig{Mode: "masking", RoundId: make([]byte, 32), GraphSeed: make([]byte, 32), Degree: 3, Threshold: 3, Length: 8,
		Roster: []*fedpb.SecAggMember{{Id: 1, Client: "a"}, {Id: 2, Client: "b"}, {Id: 3, Client: "c"}, {Id: 4, Client: "d"}},
		Quant:  &fedpb.QuantConfig{Dim: 6, Clip: 1, Gamma: 1.0 / 1024, Beta: 0.6, Bits: 32, WrapProb: 1e-9}}
	b, _ := proto.Marshal(good)
	f.Add(b)
	bad := proto.Clone(good).(*fedpb.SecAggConfig)
	bad.Roster = append(bad.Roster, &fedpb.SecAggMember{Id: 1, Client: "a"})
	b, _ = proto.Marshal(bad)
	f.Add(b)
	withPlan := proto.Clone(good).(*fedpb.SecAggConfig)
	withPlan.Ddp = &fedpb.DDPPlan{Unit: "identity", Delta: 1e-5, Clip: 1, SamplingRate: 0.1, Rounds: 10, Clients: 4, Threshold: 3,
		Noise: 100, Dim: 6, Block: 8, Scale: 1 << 10, Bits: 32, WrapProb: 1e-9, ExpectedBatch: 10}
	b, _ = proto.Marshal(withPlan)
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var cfg fedpb.SecAggConfig
		if proto.Unmarshal(b, &cfg) != nil {
			return
		}
		// The quantiser allocates for the length it is given; the client
		// bounds that by the model it accepts. Kept small here.
		if cfg.GetQuant().GetDim() > 1<<12 || cfg.GetQuant().GetBlock() > 1<<12 || len(cfg.GetRoster()) > 64 ||
			cfg.GetDdp().GetDim() > 1<<12 || cfg.GetDdp().GetBlock() > 1<<12 {
			return
		}
		if p, err := secround.Params(&cfg, [32]byte{7}); err == nil {
			if err := p.Validate(); err != nil {
				t.Fatalf("Params accepted an invalid round: %v", err)
			}
			// The configuration a client's advert signs is the whole of
			// what it parsed, and the same after a round trip.
			if p.Context != secround.RoundContext(&cfg, [32]byte{7}) {
				t.Fatal("Params does not bind the configuration's digest and the model's")
			}
		}
		again, err := proto.Marshal(&cfg)
		if err != nil {
			t.Fatal(err)
		}
		var cfg2 fedpb.SecAggConfig
		if err := proto.Unmarshal(again, &cfg2); err != nil {
			t.Fatal(err)
		}
		if secround.ConfigDigest(&cfg) != secround.ConfigDigest(&cfg2) {
			t.Fatal("a configuration and its re-encoding have different digests")
		}
		_, _ = secround.Quantizer(&cfg, cfg.GetQuant().GetNoise())
		// The distributed DP-SGD plan a hostile coordinator sends: Round
		// refuses it or returns a round whose encoding is the masked length.
		if r, plan, err := secround.Round(&cfg); err == nil {
			if r.Padded() != int(cfg.GetLength()) || int(cfg.GetThreshold()) < plan.Threshold {
				t.Fatalf("Round accepted a plan that disagrees with the masking: padded %d, length %d", r.Padded(), cfg.GetLength())
			}
		}
		d := secround.NewDirectory(&cfg, x509.NewCertPool())
		for _, m := range cfg.GetRoster() {
			if d.Add(m.GetId(), []byte(m.GetClient())) == nil {
				t.Fatal("a certificate that does not parse was accepted")
			}
		}
	})
}

// FuzzConfigEncoding checks that the canonical encoding ConfigDigest
// hashes is injective, on configurations as a hostile coordinator could
// send them: decodeConfig, a left inverse written from the protocol's
// descriptors (each field in number order: unsigned and signed integers
// fixed-width, doubles by their bits, strings and bytes length-prefixed,
// lists counted, messages behind a presence byte), recovers every
// configuration from its encoding, consuming every byte. Two different
// configurations therefore never encode, nor (short of a SHA-256
// collision) hash, alike, and a field the encoding forgot would show up
// as a difference.
func FuzzConfigEncoding(f *testing.F) {
	for _, c := range []*fedpb.SecAggConfig{
		{Mode: "masking", Roster: []*fedpb.SecAggMember{{Id: 1, Client: "ab"}, {Id: 2, Client: "c"}}},
		{Quant: &fedpb.QuantConfig{}},
		{Ddp: &fedpb.DDPPlan{Unit: "identity", Noise: 100, Clip: math.Copysign(0, -1)}},
		fullConfig(),
	} {
		b, _ := proto.Marshal(c)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var cfg fedpb.SecAggConfig
		if proto.Unmarshal(b, &cfg) != nil {
			return
		}
		enc := secround.AppendConfig(nil, &cfg)
		var got fedpb.SecAggConfig
		rest, err := decodeConfig(got.ProtoReflect(), enc)
		if err != nil || len(rest) != 0 {
			t.Fatalf("the encoding does not decode (%v, %d bytes left)", err, len(rest))
		}
		discardUnknown(cfg.ProtoReflect())
		if !proto.Equal(&got, &cfg) {
			t.Fatalf("decoded\n%v\nfrom the encoding of\n%v", &got, &cfg)
		}
		if !bytes.Equal(secround.AppendConfig(nil, &got), enc) {
			t.Fatal("the decoded configuration encodes differently")
		}
	})
}

// discardUnknown drops the unknown fields of m and its messages (the
// encoding does not cover them: no client reads them).
func discardUnknown(m protoreflect.Message) {
	m.SetUnknown(nil)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			for i := range v.List().Len() {
				discardUnknown(v.List().Get(i).Message())
			}
		case fd.Kind() == protoreflect.MessageKind:
			discardUnknown(v.Message())
		}
		return true
	})
}

// decodeConfig reads into m the canonical encoding of a message of its
// type and returns the bytes after it.
func decodeConfig(m protoreflect.Message, b []byte) ([]byte, error) {
	fields := m.Descriptor().Fields()
	ordered := make([]protoreflect.FieldDescriptor, fields.Len())
	for i := range ordered {
		ordered[i] = fields.Get(i)
	}
	slices.SortFunc(ordered, func(a, b protoreflect.FieldDescriptor) int { return int(a.Number() - b.Number()) })
	var err error
	for _, fd := range ordered {
		switch {
		case fd.IsList():
			var n uint64
			if n, b, err = fixed(b, 4); err != nil {
				return nil, err
			}
			if n > uint64(len(b)) {
				return nil, errors.New("list count beyond the bytes left")
			}
			l := m.Mutable(fd).List()
			for range n {
				var v protoreflect.Value
				if v, b, err = decodeValue(fd, l.NewElement, b); err != nil {
					return nil, err
				}
				l.Append(v)
			}
		case fd.Kind() == protoreflect.MessageKind:
			if len(b) == 0 || b[0] > 1 {
				return nil, errors.New("bad presence byte")
			}
			present := b[0] == 1
			b = b[1:]
			if present {
				var v protoreflect.Value
				if v, b, err = decodeValue(fd, func() protoreflect.Value { return m.NewField(fd) }, b); err != nil {
					return nil, err
				}
				m.Set(fd, v)
			}
		default:
			var v protoreflect.Value
			if v, b, err = decodeValue(fd, nil, b); err != nil {
				return nil, err
			}
			m.Set(fd, v)
		}
	}
	return b, nil
}

func decodeValue(fd protoreflect.FieldDescriptor, newMsg func() protoreflect.Value, b []byte) (protoreflect.Value, []byte, error) {
	var n uint64
	var err error
	switch fd.Kind() {
	case protoreflect.MessageKind:
		v := newMsg()
		b, err = decodeConfig(v.Message(), b)
		return v, b, err
	case protoreflect.Uint32Kind:
		n, b, err = fixed(b, 4)
		return protoreflect.ValueOfUint32(uint32(n)), b, err
	case protoreflect.Uint64Kind:
		n, b, err = fixed(b, 8)
		return protoreflect.ValueOfUint64(n), b, err
	case protoreflect.Int64Kind:
		n, b, err = fixed(b, 8)
		return protoreflect.ValueOfInt64(int64(n)), b, err
	case protoreflect.DoubleKind:
		n, b, err = fixed(b, 8)
		return protoreflect.ValueOfFloat64(math.Float64frombits(n)), b, err
	case protoreflect.StringKind, protoreflect.BytesKind:
		if n, b, err = fixed(b, 4); err != nil {
			return protoreflect.Value{}, nil, err
		}
		if n > uint64(len(b)) {
			return protoreflect.Value{}, nil, errors.New("length beyond the bytes left")
		}
		p := slices.Clone(b[:n])
		if fd.Kind() == protoreflect.StringKind {
			return protoreflect.ValueOfString(string(p)), b[n:], nil
		}
		return protoreflect.ValueOfBytes(p), b[n:], nil
	}
	return protoreflect.Value{}, nil, fmt.Errorf("field %s of kind %s: the canonical encoding has no rule for it", fd.FullName(), fd.Kind())
}

func fixed(b []byte, size int) (uint64, []byte, error) {
	if len(b) < size {
		return 0, nil, errors.New("truncated")
	}
	var v uint64
	for _, c := range b[:size] {
		v = v<<8 | uint64(c)
	}
	return v, b[size:], nil
}

// FuzzModelDigest: ModelDigest accepts exactly the hex encodings of 32
// bytes, and what it accepts is the version it was given.
func FuzzModelDigest(f *testing.F) {
	f.Add(strings.Repeat("ab", 32))
	f.Add(strings.Repeat("AB", 32))
	f.Add("")
	f.Add(strings.Repeat("0", 63))
	f.Fuzz(func(t *testing.T, v string) {
		d, err := secround.ModelDigest(v)
		if err != nil {
			return
		}
		if len(v) != 64 || !strings.EqualFold(hex.EncodeToString(d[:]), v) {
			t.Fatalf("ModelDigest(%q) = %x", v, d)
		}
	})
}
