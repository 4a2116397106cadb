package coord_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/ddp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/secround"
)

// tamperStream rewrites, in flight, the round pushed to one client.
type tamperStream struct {
	grpc.ServerStream
	edit func(*fedpb.RoundConfig)
}

func (s tamperStream) SendMsg(m any) error {
	if p, ok := m.(*fedpb.Push); ok && p.GetTask().GetSecagg() != nil {
		p = proto.Clone(p).(*fedpb.Push)
		s.edit(p.GetTask())
		m = p
	}
	return s.ServerStream.SendMsg(m)
}

// TestPlanTamperedInFlightIsRefused runs a distributed DP-SGD round on
// the real coordinator over mutual TLS while the round pushed to client-1
// is rewritten in flight to a plan with twice the noise share (client-1
// would charge its ledger for noise the other clients do not add). The
// coordinator refuses client-1's key advert, made under another
// configuration, naming it; client-1 stops, its ledger byte for byte as
// before; the three others complete the round among themselves (t = 3)
// and each is charged once. Before the configuration was bound into the
// signed adverts, client-1 took part under its altered plan and was
// charged (at the task) for noise the sum did not carry.
func TestPlanTamperedInFlightIsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	testCA(t, dir)
	o := secOptions(t, dir, filepath.Join(t.TempDir(), "state.db"), 1)
	o.Task.DP = nil
	plan := ddp.Plan{Unit: "identity", Delta: 1e-5, Clip: 1, SamplingRate: 0.1, Rounds: 10, Clients: 4, Threshold: 3, Noise: 1,
		Dim: 6, Scale: 1 << 10, Bits: 32, WrapProb: 1e-9, ExpectedBatch: 2}
	dpol, err := ddpClientPolicy().Distributed()
	if err != nil {
		t.Fatal(err)
	}
	if plan.Noise, err = ddp.RequiredNoise(dpol, plan); err != nil {
		t.Fatal(err)
	}
	o.SecAgg.DDP = &coord.DDPOptions{Plan: plan, Server: &sgdServer{}} // learning rate 0: the model stays
	doubled := plan
	doubled.Noise *= 2
	tamper := grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if p, ok := peer.FromContext(ss.Context()); ok {
			if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 &&
				ti.State.PeerCertificates[0].Subject.CommonName == "client-1" {
				ss = tamperStream{ss, func(r *fedpb.RoundConfig) { r.Secagg.Ddp = secround.PlanProto(doubled) }}
			}
		}
		return h(srv, ss)
	})
	h := startHarnessWith(t, o, dir, []grpc.ServerOption{tamper}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(secNames))
	before := map[string]string{}
	var ids sync.Map
	for i, name := range secNames {
		id, err := pki.LoadIdentity(filepath.Join(h.dir, name+".crt"), filepath.Join(h.dir, name+".key"), filepath.Join(h.dir, "ca.crt"))
		if err != nil {
			t.Fatal(err)
		}
		ledgers := filepath.Join(h.dir, "clients", name, "ledgers")
		c, err := client.New(client.Options{Addr: h.addr, Creds: h.creds(t, name), Policy: ddpClientPolicy(), Identity: id,
			Dir: filepath.Join(h.dir, "clients", name), LedgerDir: ledgers, DataSet: name, Trainer: ddpTrainer{sum: ddpSums(i), ids: &ids},
			ReconnectFor: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if name == "client-1" {
			before = ledgerFiles(t, ledgers)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Run(ctx)
			if name == "client-1" {
				after := ledgerFiles(t, ledgers)
				if len(before) == 0 || len(after) != len(before) {
					t.Errorf("client-1's ledger folder: %d files before, %d after", len(before), len(after))
				}
				for p, b := range before {
					if after[p] != b {
						t.Errorf("client-1's %s changed", filepath.Base(p))
					}
				}
			}
		}()
	}
	wg.Wait()
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "different configurations") {
		t.Fatalf("client-1 ended with %v; want the coordinator's refusal of its advert, naming the different configuration", errs[0])
	}
	eps, err := plan.Mechanism(2).Epsilon(1, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range secNames[1:] {
		if errs[i+1] != nil {
			t.Errorf("%s: %v", name, errs[i+1])
		}
	}
	if st, updates, reason, _ := roundRow(t, h.state, "client-2"); st != "done" || updates != 3 {
		t.Fatalf("round 1: %s with %d updates (%s), want done with the three clients whose configuration was not altered", st, updates, reason)
	}
	for _, name := range secNames[1:] {
		ld, err := dp.OpenLedgerDir(filepath.Join(h.dir, "clients", name, "ledgers"))
		if err != nil {
			t.Fatal(err)
		}
		l, err := ld.Read(dp.DataSet{Name: name, Unit: dp.UnitIdentity})
		if err != nil {
			t.Fatal(err)
		}
		if s, err := l.Spent(nil); err != nil || s.Epsilon < eps*(1-1e-9) || s.Epsilon > eps*(1+1e-9) {
			t.Errorf("%s spent %+v (%v), want one round: ε = %g", name, s, err, eps)
		}
	}
}

// ledgerFiles returns the files of a ledger folder with their bytes.
func ledgerFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Error(err)
		return out
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Error(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}
