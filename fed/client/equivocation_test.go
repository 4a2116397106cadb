package client_test

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"net"
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
	"github.com/veil-privacy/veil/fed/ddp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/secround"
	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/secagg/masking"
)

// equivocator is a coordinator, over gRPC with mutual TLS, that runs one
// masking round among real fed clients and relays every message as an
// honest coordinator does (each client its neighbours' adverts with
// their certificates, the shares addressed to it, then the unmasking
// request naming every client a survivor), but checks nothing and gives
// each client its own task (tasks, by certificate name): the coordinator
// that tells clients different distributed DP plans. It keeps what it
// received, and unmasks the sum with the real masking server once it
// has every masked vector and unmasking response.
type equivocator struct {
	fedpb.UnimplementedCoordinatorServer
	tasks map[string]*fedpb.RoundConfig
	model wire.Weights
	// models, by client name, overrides model: the weights that client
	// downloads (a coordinator that serves clients different models).
	models map[string]wire.Weights

	mu      sync.Mutex
	push    map[string]chan *fedpb.Push
	adverts map[string][]byte // by client name
	certs   map[string][]byte
	shares  map[string][]byte
	masked  map[string][]byte
	unmask  map[string][]byte
	sum     []uint32
	sumErr  error
}

// startEquivocator serves e on loopback with the authority in dir
// (coordinator.crt) until the test ends.
func startEquivocator(t *testing.T, e *equivocator, dir string) string {
	t.Helper()
	e.push = map[string]chan *fedpb.Push{}
	for n := range e.tasks {
		e.push[n] = make(chan *fedpb.Push, 8)
	}
	e.adverts, e.certs, e.shares, e.masked, e.unmask = map[string][]byte{}, map[string][]byte{}, map[string][]byte{}, map[string][]byte{}, map[string][]byte{}
	id, err := pki.LoadIdentity(filepath.Join(dir, "coordinator.crt"), filepath.Join(dir, "coordinator.key"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(pki.ServerTLS(id, nil))))
	fedpb.RegisterCoordinatorServer(srv, e)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// caller is the certificate name and DER of the call's client.
func caller(ctx context.Context) (string, []byte, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", nil, errors.New("no peer")
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return "", nil, errors.New("no client certificate")
	}
	leaf := ti.State.PeerCertificates[0]
	return leaf.Subject.CommonName, leaf.Raw, nil
}

func (e *equivocator) Join(ctx context.Context, req *fedpb.JoinRequest) (*fedpb.JoinResponse, error) {
	name, _, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	return &fedpb.JoinResponse{ProtocolVersion: fedpb.ProtocolVersion, ClientId: name, BudgetEpsilon: req.GetBudgetEpsilon(), BudgetDelta: req.GetBudgetDelta()}, nil
}

func (e *equivocator) DownloadModel(_ *fedpb.ModelRequest, stream grpc.ServerStreamingServer[fedpb.WeightsChunk]) error {
	name, _, err := caller(stream.Context())
	if err != nil {
		return err
	}
	m := e.model
	if o, ok := e.models[name]; ok {
		m = o
	}
	if err := stream.Send(&fedpb.WeightsChunk{Part: &fedpb.WeightsChunk_Header{Header: m.Header()}}); err != nil {
		return err
	}
	return m.Chunks(wire.DefaultChunk, func(b []byte) error { return stream.Send(&fedpb.WeightsChunk{Part: &fedpb.WeightsChunk_Data{Data: b}}) })
}

func (e *equivocator) Decline(context.Context, *fedpb.DeclineRequest) (*fedpb.DeclineResponse, error) {
	return &fedpb.DeclineResponse{ProtocolVersion: fedpb.ProtocolVersion}, nil
}

// Subscribe pushes the caller its own task, then the phase messages.
func (e *equivocator) Subscribe(_ *fedpb.SubscribeRequest, stream grpc.ServerStreamingServer[fedpb.Push]) error {
	name, _, err := caller(stream.Context())
	if err != nil {
		return err
	}
	if err := stream.Send(&fedpb.Push{ProtocolVersion: fedpb.ProtocolVersion, Msg: &fedpb.Push_Task{Task: e.tasks[name]}}); err != nil {
		return err
	}
	for {
		select {
		case p := <-e.push[name]:
			if err := stream.Send(p); err != nil {
				return err
			}
		case <-stream.Context().Done():
			return nil
		}
	}
}

func (e *equivocator) SecAggSend(ctx context.Context, m *fedpb.SecAggMessage) (*fedpb.SecAggAck, error) {
	name, der, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch x := m.GetMsg().(type) {
	case *fedpb.SecAggMessage_Advert:
		e.adverts[name], e.certs[name] = x.Advert, der
		if len(e.adverts) == len(e.tasks) {
			err = e.relayAdverts()
		}
	case *fedpb.SecAggMessage_Shares:
		e.shares[name] = x.Shares
		if len(e.shares) == len(e.tasks) {
			err = e.relayShares()
		}
	case *fedpb.SecAggMessage_Unmask:
		e.unmask[name] = x.Unmask
		if len(e.unmask) == len(e.tasks) {
			e.sum, e.sumErr = e.unmaskSum()
			e.pushAll(func(string) *fedpb.Push {
				return &fedpb.Push{ProtocolVersion: fedpb.ProtocolVersion, Msg: &fedpb.Push_Done{Done: "unmasked"}}
			})
		}
	}
	if err != nil {
		return nil, err
	}
	return &fedpb.SecAggAck{ProtocolVersion: fedpb.ProtocolVersion, Accepted: true}, nil
}

func (e *equivocator) SubmitMasked(stream grpc.ClientStreamingServer[fedpb.UpdateChunk, fedpb.SubmitResponse]) error {
	name, _, err := caller(stream.Context())
	if err != nil {
		return err
	}
	var payload []byte
	for {
		ch, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		payload = append(payload, ch.GetData()...)
	}
	e.mu.Lock()
	e.masked[name] = payload
	if len(e.masked) == len(e.tasks) {
		req := &masking.UnmaskRequest{RoundID: e.roundID()}
		for _, mb := range e.anyTask().GetSecagg().GetRoster() {
			req.Survivors = append(req.Survivors, mb.GetId())
		}
		b, _ := req.MarshalBinary()
		e.pushAll(func(string) *fedpb.Push {
			return e.phase(&fedpb.SecAggPhase{Msg: &fedpb.SecAggPhase_Unmask{Unmask: b}})
		})
	}
	e.mu.Unlock()
	return stream.SendAndClose(&fedpb.SubmitResponse{ProtocolVersion: fedpb.ProtocolVersion, Accepted: true})
}

func (e *equivocator) anyTask() *fedpb.RoundConfig {
	for _, t := range e.tasks {
		return t
	}
	return nil
}

func (e *equivocator) roundID() [32]byte { return [32]byte(e.anyTask().GetSecagg().GetRoundId()) }

func (e *equivocator) id(name string) uint32 {
	id, _ := secround.ID(e.tasks[name].GetSecagg(), name)
	return id
}

func (e *equivocator) phase(ph *fedpb.SecAggPhase) *fedpb.Push {
	ph.Round = e.anyTask().GetRound()
	return &fedpb.Push{ProtocolVersion: fedpb.ProtocolVersion, Msg: &fedpb.Push_Secagg{Secagg: ph}}
}

func (e *equivocator) pushAll(msg func(name string) *fedpb.Push) {
	for n := range e.tasks {
		e.push[n] <- msg(n)
	}
}

// relayAdverts pushes each client its neighbours' adverts in the graph
// of its task, with their certificates, unchecked.
func (e *equivocator) relayAdverts() error {
	msgs := map[string]*fedpb.Push{}
	for to := range e.tasks {
		g, err := e.graph(to)
		if err != nil {
			return err
		}
		var ads []masking.KeyAdvert
		out := &fedpb.SecAggAdverts{}
		for from, b := range e.adverts {
			if from == to {
				continue
			}
			var a masking.KeyAdvert
			if err := a.UnmarshalBinary(b); err != nil {
				return err
			}
			if !g.Adjacent(e.id(to), a.From) {
				continue
			}
			ads = append(ads, a)
			out.Certs = append(out.Certs, &fedpb.SecAggCert{Id: a.From, Der: e.certs[from]})
		}
		if out.Adverts, err = masking.EncodeAdverts(e.roundID(), ads); err != nil {
			return err
		}
		msgs[to] = e.phase(&fedpb.SecAggPhase{Msg: &fedpb.SecAggPhase_Adverts{Adverts: out}})
	}
	e.pushAll(func(n string) *fedpb.Push { return msgs[n] })
	return nil
}

// relayShares pushes each client the shares addressed to it.
func (e *equivocator) relayShares() error {
	to := map[uint32][]masking.EncryptedShare{}
	for _, b := range e.shares {
		_, sh, err := masking.DecodeShares(b)
		if err != nil {
			return err
		}
		for _, s := range sh {
			to[s.To] = append(to[s.To], s)
		}
	}
	msgs := map[string]*fedpb.Push{}
	for n := range e.tasks {
		b, err := masking.EncodeShares(e.roundID(), to[e.id(n)])
		if err != nil {
			return err
		}
		msgs[n] = e.phase(&fedpb.SecAggPhase{Msg: &fedpb.SecAggPhase_Shares{Shares: b}})
	}
	e.pushAll(func(n string) *fedpb.Push { return msgs[n] })
	return nil
}

// unmaskSum replays what the clients sent into the real masking server
// (parameters of the first task) and unmasks the sum.
func (e *equivocator) unmaskSum() ([]uint32, error) {
	md, err := secround.ModelDigest(e.anyTask().GetModelVersion())
	if err != nil {
		return nil, err
	}
	p, err := secround.Params(e.anyTask().GetSecagg(), md)
	if err != nil {
		return nil, err
	}
	keys := masking.StaticKeys{}
	srv, err := masking.NewServer(p, keys)
	if err != nil {
		return nil, err
	}
	for n := range e.tasks {
		leaf, err := x509.ParseCertificate(e.certs[n])
		if err != nil {
			return nil, err
		}
		keys[e.id(n)] = leaf.PublicKey
		var a masking.KeyAdvert
		if err := a.UnmarshalBinary(e.adverts[n]); err != nil {
			return nil, err
		}
		if err := srv.ReceiveAdvert(&a); err != nil {
			return nil, err
		}
	}
	for n := range e.tasks {
		if _, err := srv.AdvertsFor(e.id(n)); err != nil {
			return nil, err
		}
	}
	for n := range e.tasks {
		_, sh, err := masking.DecodeShares(e.shares[n])
		if err != nil {
			return nil, err
		}
		if err := srv.ReceiveShares(e.id(n), sh); err != nil {
			return nil, err
		}
	}
	for n := range e.tasks {
		if _, err := srv.SharesFor(e.id(n)); err != nil {
			return nil, err
		}
	}
	for n := range e.tasks {
		var mi masking.MaskedInput
		if err := mi.UnmarshalBinary(e.masked[n]); err != nil {
			return nil, err
		}
		if err := srv.ReceiveMasked(&mi); err != nil {
			return nil, err
		}
	}
	if _, err := srv.UnmaskRequest(); err != nil {
		return nil, err
	}
	for n := range e.tasks {
		var u masking.UnmaskResponse
		if err := u.UnmarshalBinary(e.unmask[n]); err != nil {
			return nil, err
		}
		if err := srv.ReceiveUnmask(&u); err != nil {
			return nil, err
		}
	}
	res, err := srv.Sum()
	if err != nil {
		return nil, err
	}
	return res.Sum, nil
}

// TestEquivocatedPlanIsRefusedByEveryClient plays a coordinator that
// gives client-1 one configuration of a distributed DP-SGD round and the
// three others another, each inside every owner's policy taken alone:
// client-1 told a noise share twice the others' (it would charge its
// ledger for noise the sum does not carry), a lower sampling rate, half
// the rounds, or T = 2 where the others are told T = 4; or, in a round of
// local DP under masking, another quantiser clip; or, in either mode,
// client-1 is served other weights than the rest (a task naming another
// model version: a model crafted to isolate client-1's update in the sum,
// which without noise would expose it). Over gRPC with
// mutual TLS, every client refuses the round on the neighbours' adverts,
// naming the different configuration; none sends shares or a masked
// vector, none computes its clipped sum, so the coordinator unmasks
// nothing; and every client's ledger folder is byte for byte as before
// the round. With one configuration for all, the same coordinator gets
// every client's shares, masked vector and unmasking response and
// unmasks the sum, and each ledger holds exactly one charge of the plan's
// mechanism.
//
// Before the configuration was bound into the signed adverts and the
// charge moved after the adverts' check, the equivocated cases ran to the
// unmasked sum and each client's ledger was charged (at the task); before
// the model's digest was bound (secround.RoundContext), the two
// other-model cases still did.
func TestEquivocatedPlanIsRefusedByEveryClient(t *testing.T) {
	names := []string{"client-1", "client-2", "client-3", "client-4"}
	dir := issueRoster(t, names)
	m0 := model0()
	distributed, plan := ddpTask(t)
	distributed = nameTask(distributed, names, m0)
	local, localPolicy := localTask(t, names, m0)
	// A model a coordinator could craft for client-1 alone: the round's
	// model with one weight changed (in an attack, weights that make
	// client-1's update stand out in the sum).
	m1 := model0()
	m1[0].Values[0] += 1
	for _, tc := range []struct {
		name  string
		local bool
		edit  func(*fedpb.SecAggConfig) // client-1's configuration
		// model serves client-1 m1, in a task naming it.
		model bool
	}{
		{name: "one configuration"},
		{name: "local DP: one configuration", local: true},
		{name: "local DP: client-1 told another quantiser clip", local: true, edit: func(sa *fedpb.SecAggConfig) { sa.Quant.Clip = 5 }},
		{name: "client-1 told twice the noise share", local: false, edit: func(sa *fedpb.SecAggConfig) {
			p := plan
			p.Noise *= 2
			sa.Ddp = secround.PlanProto(p)
		}},
		{name: "client-1 told a lower sampling rate", local: false, edit: func(sa *fedpb.SecAggConfig) {
			p := plan
			p.SamplingRate /= 2
			sa.Ddp = secround.PlanProto(p)
		}},
		{name: "client-1 told T = 2, the others T = 4", local: false, edit: func(sa *fedpb.SecAggConfig) { sa.MinHonest = 2 }},
		{name: "client-1 served another model", model: true},
		{name: "local DP: client-1 served another model", local: true, model: true},
		{name: "client-1 told half the rounds", local: false, edit: func(sa *fedpb.SecAggConfig) {
			p := plan
			p.Rounds /= 2
			sa.Ddp = secround.PlanProto(p)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &equivocator{tasks: map[string]*fedpb.RoundConfig{}, model: m0}
			base, pol := distributed, ddpPolicy()
			if tc.local {
				base, pol = local, localPolicy
			}
			for _, n := range names {
				e.tasks[n] = proto.Clone(base).(*fedpb.RoundConfig)
			}
			if tc.edit != nil {
				tc.edit(e.tasks["client-1"].Secagg)
			}
			if tc.model {
				e.models = map[string]wire.Weights{"client-1": m1}
				e.tasks["client-1"].ModelVersion = wire.Version(m1.Header())
			}
			results := runClients(t, e, dir, names, pol)
			e.mu.Lock()
			defer e.mu.Unlock()
			if tc.edit == nil && !tc.model {
				// The control: the round runs to the unmasked sum.
				if e.sumErr != nil || len(e.sum) != int(base.Secagg.Length) {
					t.Fatalf("with one configuration the coordinator did not unmask the sum: %v", e.sumErr)
				}
				for i, r := range results {
					if r.err != nil || r.sums != 1 {
						t.Fatalf("%s: %v after %d clipped sums or trainings", names[i], r.err, r.sums)
					}
					checkOneCharge(t, r.dir, names[i], plan, tc.local)
				}
				return
			}
			for i, r := range results {
				if !errors.Is(r.err, client.ErrSecAgg) || !strings.Contains(r.err.Error(), "another configuration of this round") ||
					!strings.Contains(r.err.Error(), "nothing was charged") {
					t.Errorf("%s ended with %v; want a refusal naming the different configuration", names[i], r.err)
				}
				r.untouched(t, names[i])
			}
			if len(e.adverts) != len(names) || len(e.shares) != 0 || len(e.masked) != 0 || len(e.unmask) != 0 || e.sum != nil {
				t.Fatalf("the coordinator got %d adverts, %d share sets, %d masked vectors, %d unmasking responses (sum %v); want the adverts only",
					len(e.adverts), len(e.shares), len(e.masked), len(e.unmask), e.sum != nil)
			}
		})
	}
}

// nameTask gives task's roster the names, in order, and makes it a
// round of model m that closes in an hour.
func nameTask(task *fedpb.RoundConfig, names []string, m wire.Weights) *fedpb.RoundConfig {
	task.ProtocolVersion, task.ModelVersion, task.DeadlineUnixMs = fedpb.ProtocolVersion, wire.Version(m.Header()), time.Now().Add(time.Hour).UnixMilli()
	task.Secagg.RoundId[0], task.Secagg.MinHonest = 7, 4
	for i, n := range names {
		task.Secagg.Roster[i].Client = n
	}
	return task
}

// localTask is a local DP round under masking (each client's own DP-SGD,
// quantised) among names, of model m, and an owner's policy (T = 3)
// that accepts it.
func localTask(t *testing.T, names []string, m wire.Weights) (*fedpb.RoundConfig, client.Policy) {
	t.Helper()
	local := nameTask(secureTask(), names, m)
	local.Secagg.Quant.Clip = 10
	q, err := secround.Quantizer(local.Secagg, 0)
	if err != nil {
		t.Fatal(err)
	}
	local.Secagg.Length = uint32(q.Padded())
	pol := policy()
	pol.SecAgg = client.SecAggPolicy{Require: true, MinHonest: 3}
	return local, pol
}

// graph is the round's communication graph as name's task gives it.
func (e *equivocator) graph(name string) (*masking.Graph, error) {
	task := e.tasks[name]
	md, err := secround.ModelDigest(task.GetModelVersion())
	if err != nil {
		return nil, err
	}
	p, err := secround.Params(task.GetSecagg(), md)
	if err != nil {
		return nil, err
	}
	return masking.NewGraph(&p)
}

// issueRoster makes an authority in a temporary folder and issues a
// server certificate to "coordinator" and a client certificate to each
// name; it returns the folder.
func issueRoster(t *testing.T, names []string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pki")
	ca, err := pki.Init(dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range append([]string{"coordinator"}, names...) {
		role := pki.Client
		if n == "coordinator" {
			role = pki.Server
		}
		if _, err := ca.Issue(pki.IssueOptions{Name: n, Role: role}); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// clientResult is how one client of runClients ended: its error, its
// folder, its ledger folder before and after (file → bytes), and how
// many clipped sums it computed or trainings it ran.
type clientResult struct {
	err           error
	dir           string
	before, after map[string]string
	sums          int
}

// untouched checks that the client neither computed nor trained and that
// its ledger folder is byte for byte as before the round.
func (r *clientResult) untouched(t *testing.T, name string) {
	t.Helper()
	if r.sums != 0 {
		t.Errorf("%s computed its clipped sum or trained", name)
	}
	if len(r.before) != len(r.after) {
		t.Errorf("%s's ledger folder: %d files before the round, %d after", name, len(r.before), len(r.after))
	}
	for path, b := range r.before {
		if r.after[path] != b {
			t.Errorf("%s: %s changed", name, filepath.Base(path))
		}
	}
}

// runClients serves e with the authority in dir and runs one real fed
// client per name, with policy pol, until each stops (30 s at most).
func runClients(t *testing.T, e *equivocator, dir string, names []string, pol client.Policy) []clientResult {
	t.Helper()
	addr := startEquivocator(t, e, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	results := make([]clientResult, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		id, err := pki.LoadIdentity(filepath.Join(dir, n+".crt"), filepath.Join(dir, n+".key"), filepath.Join(dir, "ca.crt"))
		if err != nil {
			t.Fatal(err)
		}
		cdir := filepath.Join(t.TempDir(), n)
		tr := &sumTrainer{planTrainer: planTrainer{sigma: 2, q: 0.1}}
		c, err := client.New(client.Options{Addr: addr, Creds: credentials.NewTLS(pki.ClientTLS(id, "localhost")), Policy: pol,
			Identity: id, Dir: cdir, LedgerDir: filepath.Join(cdir, "ledgers"), DataSet: n, Trainer: tr, ReconnectFor: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// The ledger folder, byte for byte (the folder also caches the
		// public model, downloaded with the task).
		results[i].dir, results[i].before = cdir, snapshot(t, filepath.Join(cdir, "ledgers"))
		if len(results[i].before) == 0 {
			t.Fatal("the client keeps no ledger")
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i].err = c.Run(ctx)
			results[i].after = snapshot(t, filepath.Join(cdir, "ledgers"))
			tr.mu.Lock()
			results[i].sums = tr.sums
			tr.mu.Unlock()
			results[i].sums += tr.count()
		}()
	}
	wg.Wait()
	return results
}

// checkOneCharge checks that the ledger of data set name in the client
// folder dir holds exactly one charge: one round of plan's mechanism at
// the owner's T = 3 (local: a charge of the client's own DP-SGD).
func checkOneCharge(t *testing.T, dir, name string, plan ddp.Plan, local bool) {
	t.Helper()
	ld, err := dp.OpenLedgerDir(filepath.Join(dir, "ledgers"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := ld.Read(dp.DataSet{Name: name, Unit: dp.UnitIdentity})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, e := range l.History() {
		if e.Kind != dp.HistoryCharge {
			continue
		}
		n++
		if local {
			continue
		}
		want, err := plan.Mechanism(3).Epsilon(1, 1e-5)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(e.Note, plan.Mechanism(3).Label()) || e.ChargeEpsilon < want*(1-1e-9) || e.ChargeEpsilon > want*(1+1e-9) {
			t.Fatalf("charge %q of ε = %g; want the plan's mechanism, ε = %g", e.Note, e.ChargeEpsilon, want)
		}
	}
	if n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}
