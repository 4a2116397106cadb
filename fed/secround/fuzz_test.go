package secround_test

import (
	"crypto/x509"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/secround"
)

// FuzzSecAggConfig feeds a client's checks of a round's secure
// aggregation section arbitrary bytes, as a hostile coordinator could
// send them: Params, Quantizer and the directory must refuse or accept
// without panicking, and what Params accepts is a valid masking round.
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
		if p, err := secround.Params(&cfg); err == nil {
			if err := p.Validate(); err != nil {
				t.Fatalf("Params accepted an invalid round: %v", err)
			}
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
