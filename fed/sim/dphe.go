package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"path/filepath"

	"google.golang.org/grpc"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/dphefed"
	"github.com/veil-privacy/veil/fed/keygen"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/secagg/dphe"
)

// DPHE makes every round of a simulation (SecAgg "dphe") a DPHE round
// through the real protocol (package fed/dphefed): a key generator of its
// own (fed/keygen: its own mTLS certificate, state folder and Paillier
// key) beside the coordinator, which sets each round up there, multiplies
// the clients' ciphertexts and has the key generator decrypt their sum.
// Each client trains its local epochs without DP-SGD, then releases its
// whole update with DPHE's own DP (clip DP.Clip, a DP selection of Count
// blocks by Irene's sparse vector, exact discrete Gaussian noise σ·C on
// the selected coordinates), charged to its own ledger for its people
// before any noise is drawn, encrypts it and sends it. The coordinator
// averages the decrypted sum uniformly (FedAvg, server learning rate 1 by
// default: the clients' optimisers see no DP noise, so the √K rule of
// local-DP FedAvg does not apply).
//
// The release's unit is the client's whole update (sensitivity C, no
// sampling): it protects each of the client's people, and all of them at
// once. See docs/dphe-settings.md for the settings and why.
type DPHE struct {
	// Count is the number of blocks (of the packing's lanes) each client's
	// selection chooses per round (0: a tenth of the blocks; at most the
	// blocks).
	Count int
	// NoiseMultiplier is σ (0: the smallest with which the run's rounds
	// spend each client's budget, NoiseMultiplierFor).
	NoiseMultiplier float64
	// SelectionEpsilon and SelectionThreshold are Irene's ε and γ₃ (the
	// selection's δ is the clients' δ).
	SelectionEpsilon, SelectionThreshold float64
	// KeyBits is the key generator's Paillier modulus (0: 2048; smaller
	// keys are for tests, and make every party accept them).
	KeyBits int
	// InProcess runs the same rounds in one process, the releases added
	// as the key generator would reveal their sum (no network, nothing
	// encrypted; the packing of a 2048-bit key): see dpheLocal.
	InProcess bool

	// set by Run: the settings the rounds use.
	lanes, blocks int
	bound         float64
}

// minDPHEClients is the least number of clients whose sum the key
// generator decrypts.
const minDPHEClients = 3

// check validates d against o.
func (d *DPHE) check(o *Options) error {
	switch {
	case o.SecAgg != "dphe":
		return errors.New("sim: DPHE settings apply to --secagg dphe only")
	case o.DP == nil:
		return errors.New("sim: DPHE rounds release each client's update with its own DP: a budget is required")
	case o.Strategy != "fedavg":
		return errors.New("sim: DPHE rounds average the clients' updates (fedavg)")
	case o.Partition.Clients < minDPHEClients:
		return fmt.Errorf("sim: the key generator decrypts sums of at least %d clients, got %d clients", minDPHEClients, o.Partition.Clients)
	case d.Count < 0:
		return fmt.Errorf("sim: DPHE's selection count must be at least one block (0: a tenth of them), got %d", d.Count)
	case !(d.NoiseMultiplier >= 0) || math.IsInf(d.NoiseMultiplier, 0):
		return fmt.Errorf("sim: DPHE's noise multiplier must be ≥ 0 (0: calibrated) and finite, got %g", d.NoiseMultiplier)
	case !(d.SelectionEpsilon > 0) || math.IsInf(d.SelectionEpsilon, 0):
		return fmt.Errorf("sim: DPHE's selection ε must be positive and finite, got %g", d.SelectionEpsilon)
	case !(d.SelectionThreshold >= 0) || math.IsInf(d.SelectionThreshold, 0):
		return fmt.Errorf("sim: DPHE's selection threshold must be ≥ 0 and finite, got %g", d.SelectionThreshold)
	case d.InProcess && (d.KeyBits != 0 || o.Dropout != 0 || o.Stragglers != 0):
		return errors.New("sim: DPHE in one process encrypts nothing and simulates no drop-outs or stragglers")
	case d.KeyBits != 0 && (d.KeyBits < 512 || d.KeyBits > 4096):
		return fmt.Errorf("sim: the key generator's modulus must be 512 to 4096 bits (0: 2048), got %d", d.KeyBits)
	}
	if o.MinUpdates == 0 {
		o.MinUpdates = minDPHEClients
	}
	if o.MinUpdates < minDPHEClients {
		return fmt.Errorf("sim: a DPHE round needs at least %d contributions, got --min-updates %d", minDPHEClients, o.MinUpdates)
	}
	return nil
}

// insecure reports whether the run uses a test-sized key.
func (d *DPHE) insecure() bool { return d.KeyBits != 0 && d.KeyBits < 2048 }

// release is a client's release under d for clip and the budget, its
// NoiseMultiplier as set.
func (d *DPHE) release(clip, delta float64) dphe.Privacy {
	return dphe.Privacy{Clip: clip, NoiseMultiplier: d.NoiseMultiplier,
		Select: &dphe.Selection{Epsilon: d.SelectionEpsilon, Delta: delta, Threshold: d.SelectionThreshold, Count: d.Count}}
}

// dpheServer is the simulation's key generator and the coordinator's
// connection to it.
type dpheServer struct {
	svc *keygen.Service
	srv *grpc.Server
	kg  *dphefed.KeyGen
}

func (s *dpheServer) close() {
	s.kg.Close()
	s.srv.Stop()
	s.svc.Close()
}

// startDPHE issues the key generator's certificate, starts it on loopback
// with its own state folder, connects the coordinator to it and settles
// the rounds' packing, count and (if not given) noise multiplier for dim
// coordinates.
func startDPHE(ctx context.Context, o *Options, dir string, ca *pki.CA, identity func(string) (*pki.Identity, error), dim int) (*dpheServer, *coord.DPHEOptions, error) {
	d := o.DPHE
	if _, err := ca.Issue(pki.IssueOptions{Name: "keygen", Role: pki.Server}); err != nil {
		return nil, nil, fmt.Errorf("sim: %w", err)
	}
	kid, err := identity("keygen")
	if err != nil {
		return nil, nil, fmt.Errorf("sim: %w", err)
	}
	cid, err := identity("coordinator")
	if err != nil {
		return nil, nil, fmt.Errorf("sim: %w", err)
	}
	svc, err := keygen.Open(keygen.Options{Dir: filepath.Join(dir, "keygen"), Coordinator: "coordinator", Bits: d.KeyBits,
		AllowInsecureTestKeySize: d.insecure(), Logger: o.Logger})
	if err != nil {
		return nil, nil, fmt.Errorf("sim: %w", err)
	}
	srv := keygen.NewServer(svc, kid, pki.NewRevocations(filepath.Join(dir, "pki", "revoked.crl"), ca.Cert()), 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		svc.Close()
		return nil, nil, fmt.Errorf("sim: %w", err)
	}
	go srv.Serve(ln)
	kg, err := dphefed.Dial(dphefed.DialOptions{Addr: ln.Addr().String(), Identity: cid, Name: "keygen", ServerName: "localhost",
		AllowInsecureTestKeySize: d.insecure()})
	if err != nil {
		srv.Stop()
		svc.Close()
		return nil, nil, fmt.Errorf("sim: %w", err)
	}
	s := &dpheServer{svc: svc, srv: srv, kg: kg}
	if err := d.settle(ctx, kg, o, dim); err != nil {
		s.close()
		return nil, nil, err
	}
	return s, &coord.DPHEOptions{KeyGen: kg, Addr: ln.Addr().String(), Name: "keygen", Count: d.Count, Clip: o.DP.Clip,
		NoiseMultiplier: d.NoiseMultiplier, SelectionEpsilon: d.SelectionEpsilon, SelectionDelta: o.DP.Delta,
		SelectionThreshold: d.SelectionThreshold, Bound: d.bound}, nil
}

// settle settles the rounds' packing (the lanes of the key generator's
// key), count and σ (settleWith).
func (d *DPHE) settle(ctx context.Context, kg *dphefed.KeyGen, o *Options, dim int) error {
	pk, frac, err := kg.PublicKey(ctx)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	_, err = d.settleWith(o, dim, func(bound float64) (*dphe.Packing, error) {
		return dphe.NewPacking(pk, frac, dim, bound, o.Partition.Clients)
	})
	return err
}

// settleWith settles the packing (made by packing for the bound of
// values, C·(1 + 10σ)), the count and, with no σ given, σ calibrated so
// that o.Rounds contributions spend the clients' budget: σ and the lanes
// depend on each other through the bound, so they are settled together.
func (d *DPHE) settleWith(o *Options, dim int, packing func(bound float64) (*dphe.Packing, error)) (*dphe.Packing, error) {
	calibrate, count := d.NoiseMultiplier == 0, d.Count
	if calibrate {
		d.NoiseMultiplier = 1
	}
	for range 8 {
		d.bound = o.DP.Clip * (1 + 10*d.NoiseMultiplier)
		pack, err := packing(d.bound)
		if err != nil {
			return nil, fmt.Errorf("sim: DPHE's packing: %w", err)
		}
		d.lanes, d.blocks = pack.Lanes, pack.Blocks()
		if count == 0 {
			d.Count = max(1, d.blocks/10)
		}
		d.Count = min(d.Count, d.blocks)
		if !calibrate {
			return pack, nil
		}
		// σ calibrated for these lanes: if it gives the same lanes, the
		// settings are consistent.
		next, err := dphe.NoiseMultiplierFor(d.release(o.DP.Clip, o.DP.Delta), dim, d.lanes, o.Rounds, dp.Budget{Epsilon: o.DP.Epsilon, Delta: o.DP.Delta})
		if err != nil {
			return nil, fmt.Errorf("sim: %w", err)
		}
		if next == d.NoiseMultiplier {
			return pack, nil
		}
		d.NoiseMultiplier = next
	}
	return nil, errors.New("sim: DPHE's noise multiplier and packing did not settle")
}

// dpheClient is a simulated client's DPHE settings: it trusts the
// simulation's key generator.
func (d *DPHE) dpheClient() client.DPHEOptions {
	return client.DPHEOptions{KeyGenName: "keygen", AllowInsecureTestKeySize: d.insecure()}
}

// DPHEReport describes a DPHE simulation's release.
type DPHEReport struct {
	// Count blocks of Lanes coordinates (of Blocks) selected per client
	// and round; NoiseMultiplier σ and Clip C of the release.
	Count           int     `json:"count"`
	Lanes           int     `json:"lanes"`
	Blocks          int     `json:"blocks"`
	NoiseMultiplier float64 `json:"noise_multiplier"`
	Clip            float64 `json:"clip"`
	Bound           float64 `json:"bound"`
	// SelectionEpsilon and SelectionThreshold are Irene's.
	SelectionEpsilon   float64 `json:"selection_epsilon"`
	SelectionThreshold float64 `json:"selection_threshold"`
	KeyBits            int     `json:"key_bits"`
	// Unit says what one release protects.
	Unit string `json:"release_unit"`
}

// report describes d as run.
func (d *DPHE) report(clip float64) *DPHEReport {
	bits := d.KeyBits
	if bits == 0 {
		bits = 2048
	}
	return &DPHEReport{Count: d.Count, Lanes: d.lanes, Blocks: d.blocks, NoiseMultiplier: d.NoiseMultiplier, Clip: clip, Bound: d.bound,
		SelectionEpsilon: d.SelectionEpsilon, SelectionThreshold: d.SelectionThreshold, KeyBits: bits,
		Unit: "the client's whole update (each of its people, and all of them at once)"}
}
