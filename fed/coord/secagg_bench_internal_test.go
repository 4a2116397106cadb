package coord

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/secround"
	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/internal/cputime"
	"github.com/veil-privacy/veil/secagg/masking"
	"github.com/veil-privacy/veil/secagg/quant"
)

// BenchmarkSecureClientRound times what one client of a masking round
// does, at the coordinator's default settings for n clients (k, t from
// SecAggOptions, T = 2, 32 bits, Hadamard blocks of 2^14, γ chosen by
// the coordinator, the client's noise share at σ = 1 of its policy):
// quantising the head's 557,824 values (SecureInput: clip, rotation,
// rounding, noise; the quantiser's rotation signs included), its key advert (an ECDSA P-256 signature, as the
// federation's certificates), its shares, masking and its unmasking
// answer; and the bytes it sends as protobuf messages (SecAggSend, the
// SubmitMasked stream in wire.DefaultChunk chunks) against a plaintext
// update's stream. The other clients' steps run with the timer stopped.
//
//	go test -run XXX -bench SecureClientRound -benchtime 3x ./fed/coord/
func BenchmarkSecureClientRound(b *testing.B) {
	const dim = 557824
	for _, n := range []int{8} {
		s := &SecAggOptions{Mode: secround.Masking, MinHonest: 2, Bits: 32, Block: 1 << 14, Beta: 0.6065306597126334, WrapProb: 1e-9, NoiseMultiplier: 1}
		k, t := s.graph(n)
		b.Run(fmt.Sprintf("n=%d,k=%d,t=%d", n, k, t), func(b *testing.B) {
			qc, err := s.quantConfig(dim, n, 1)
			if err != nil {
				b.Fatal(err)
			}
			cfg := &fedpb.SecAggConfig{Mode: secround.Masking, RoundId: make([]byte, 32), GraphSeed: make([]byte, 32), Degree: uint32(k), Threshold: uint32(t),
				MinHonest: 2, Quant: qc}
			keys := masking.StaticKeys{}
			signers := map[uint32]*ecdsa.PrivateKey{}
			for i := range n {
				cfg.Roster = append(cfg.Roster, &fedpb.SecAggMember{Id: uint32(i + 1), Client: fmt.Sprintf("c%d", i+1)})
				sk, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
				signers[uint32(i+1)], keys[uint32(i+1)] = sk, sk.Public()
			}
			pol := client.DefaultPolicy(dp.Budget{Epsilon: 8, Delta: 1e-5})
			pol.SecAgg = client.SecAggPolicy{Require: true, MinHonest: 2}
			noise, err := pol.NoiseShare(cfg)
			if err != nil {
				b.Fatal(err)
			}
			up := client.Update{Weights: wire.Weights{{Name: "head", Shape: []int{dim}, Values: make([]float32, dim)}}}
			for i := range up.Weights[0].Values {
				up.Weights[0].Values[i] = float32(i%97) / 1e5
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var cpu time.Duration
			var sent int
			b.StopTimer()
			for range b.N {
				rand.Read(cfg.RoundId)
				cfg.Length = 0
				p, q, err := MaskingParams(cfg, [32]byte{})
				if err != nil {
					b.Fatal(err)
				}
				_ = q
				var mq *quant.Quantizer
				timed0 := func(f func()) {
					b.StartTimer()
					c := cputime.Thread()
					f()
					cpu += cputime.Thread() - c
					b.StopTimer()
				}
				timed0(func() { mq, err = secround.Quantizer(cfg, noise) })
				if err != nil {
					b.Fatal(err)
				}
				sent = 0
				msg := func(m proto.Message) { sent += proto.Size(m) }
				srv, _ := masking.NewServer(p, keys)
				cs := map[uint32]*masking.Client{}
				var c0 time.Duration
				timed := func(id uint32, f func()) {
					if id != 1 {
						f()
						return
					}
					b.StartTimer()
					c0 = cputime.Thread()
					f()
					cpu += cputime.Thread() - c0
					b.StopTimer()
				}
				for _, id := range p.Roster {
					var ad *masking.KeyAdvert
					timed(id, func() {
						cs[id], ad, err = masking.NewClient(masking.ClientConfig{ID: id, Signer: signers[id], Keys: keys}, p, rand.Reader)
					})
					if err != nil {
						b.Fatal(err)
					}
					if id == 1 {
						ab, _ := ad.MarshalBinary()
						msg(&fedpb.SecAggMessage{ProtocolVersion: 1, Round: 1, Msg: &fedpb.SecAggMessage_Advert{Advert: ab}})
					}
					srv.ReceiveAdvert(ad)
				}
				for _, id := range p.Roster {
					ads, _ := srv.AdvertsFor(id)
					var sh []masking.EncryptedShare
					timed(id, func() { sh, err = cs[id].ShareKeys(ads, rand.Reader) })
					if err != nil {
						b.Fatal(err)
					}
					if id == 1 {
						enc, _ := masking.EncodeShares(p.RoundID, sh)
						msg(&fedpb.SecAggMessage{ProtocolVersion: 1, Round: 1, Msg: &fedpb.SecAggMessage_Shares{Shares: enc}})
					}
					srv.ReceiveShares(id, sh)
				}
				sh, _ := srv.SharesFor(1)
				var mb []byte
				timed(1, func() {
					x, err := client.SecureInput(mq, up, rand.Reader)
					if err != nil {
						b.Fatal(err)
					}
					m, err := cs[1].MaskInput(sh, x)
					if err != nil {
						b.Fatal(err)
					}
					mb, _ = m.MarshalBinary()
				})
				msg(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Header{Header: &fedpb.UpdateHeader{ProtocolVersion: 1, Round: 1, ModelVersion: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
					Dp: &fedpb.DPParams{NoiseMultiplier: 1, Clip: 1, SamplingRate: 0.1, Steps: 5, Delta: 1e-5, PrivacyUnit: "identity"}, Masked: &fedpb.MaskedHeader{TotalBytes: uint64(len(mb))}}}})
				for c := mb; len(c) > 0; {
					d := c[:min(wire.DefaultChunk, len(c))]
					c = c[len(d):]
					msg(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Data{Data: d}})
				}
				req := &masking.UnmaskRequest{RoundID: p.RoundID, Survivors: p.Roster}
				var resp *masking.UnmaskResponse
				timed(1, func() { resp, err = cs[1].Unmask(req) })
				if err != nil {
					b.Fatal(err)
				}
				rb, _ := resp.MarshalBinary()
				msg(&fedpb.SecAggMessage{ProtocolVersion: 1, Round: 1, Msg: &fedpb.SecAggMessage_Unmask{Unmask: rb}})
			}
			plain := proto.Size(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Header{Header: &fedpb.UpdateHeader{ProtocolVersion: 1, Round: 1,
				ModelVersion: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", Dp: &fedpb.DPParams{NoiseMultiplier: 1, Clip: 1, SamplingRate: 0.1, Steps: 5, Delta: 1e-5, PrivacyUnit: "identity"},
				Weights: up.Weights.Header()}}})
			for c := up.Weights.Payload(); len(c) > 0; {
				d := c[:min(wire.DefaultChunk, len(c))]
				c = c[len(d):]
				plain += proto.Size(&fedpb.UpdateChunk{Part: &fedpb.UpdateChunk_Data{Data: d}})
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(sent), "bytes_sent")
			b.ReportMetric(float64(plain), "bytes_plaintext")
			b.ReportMetric(float64(sent)/float64(plain), "x_plaintext")
		})
	}
}
