package client_test

import (
	"context"
	"crypto"
	"crypto/ecdh"
	"crypto/rand"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/secround"
	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/secagg/masking"
)

// keyThief is a coordinator that relays client-1 its neighbours' key
// adverts after tampering with them (relay), to learn pairwise masks it
// could remove.
type keyThief struct {
	fedpb.UnimplementedCoordinatorServer
	task  *fedpb.RoundConfig
	relay func() *fedpb.SecAggAdverts

	mu      sync.Mutex
	adverts int
	shares  int
	advert  chan struct{}
}

func (k *keyThief) Join(_ context.Context, req *fedpb.JoinRequest) (*fedpb.JoinResponse, error) {
	return &fedpb.JoinResponse{ProtocolVersion: fedpb.ProtocolVersion, ClientId: "client-1", BudgetEpsilon: req.GetBudgetEpsilon(), BudgetDelta: req.GetBudgetDelta()}, nil
}

func (k *keyThief) DownloadModel(_ *fedpb.ModelRequest, stream grpc.ServerStreamingServer[fedpb.WeightsChunk]) error {
	m := model0()
	if err := stream.Send(&fedpb.WeightsChunk{Part: &fedpb.WeightsChunk_Header{Header: m.Header()}}); err != nil {
		return err
	}
	return m.Chunks(wire.DefaultChunk, func(b []byte) error { return stream.Send(&fedpb.WeightsChunk{Part: &fedpb.WeightsChunk_Data{Data: b}}) })
}

func (k *keyThief) Decline(context.Context, *fedpb.DeclineRequest) (*fedpb.DeclineResponse, error) {
	return &fedpb.DeclineResponse{ProtocolVersion: fedpb.ProtocolVersion}, nil
}

func (k *keyThief) Subscribe(_ *fedpb.SubscribeRequest, stream grpc.ServerStreamingServer[fedpb.Push]) error {
	if err := stream.Send(&fedpb.Push{ProtocolVersion: fedpb.ProtocolVersion, Msg: &fedpb.Push_Task{Task: k.task}}); err != nil {
		return err
	}
	select {
	case <-k.advert:
	case <-stream.Context().Done():
		return nil
	}
	ph := &fedpb.SecAggPhase{Round: k.task.Round, Msg: &fedpb.SecAggPhase_Adverts{Adverts: k.relay()}}
	if err := stream.Send(&fedpb.Push{ProtocolVersion: fedpb.ProtocolVersion, Msg: &fedpb.Push_Secagg{Secagg: ph}}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (k *keyThief) SecAggSend(_ context.Context, m *fedpb.SecAggMessage) (*fedpb.SecAggAck, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch m.GetMsg().(type) {
	case *fedpb.SecAggMessage_Advert:
		k.adverts++
		if k.adverts == 1 {
			close(k.advert)
		}
	case *fedpb.SecAggMessage_Shares:
		k.shares++
	}
	return &fedpb.SecAggAck{ProtocolVersion: fedpb.ProtocolVersion, Accepted: true}, nil
}

// TestClientRefusesSubstitutedKeys plays a coordinator that relays client-1
// its neighbours' adverts with keys of its own (keeping the signature),
// signed by its own certificate's key, or signed by another client's key
// and relayed with that client's certificate: client-1 refuses each
// (ErrSecAgg, naming the signature or the certificate) and sends no
// shares; with the genuine adverts it sends its shares.
func TestClientRefusesSubstitutedKeys(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	ca, err := pki.Init(dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Issue(pki.IssueOptions{Name: "coordinator", Role: pki.Server}); err != nil {
		t.Fatal(err)
	}
	names := []string{"client-1", "client-2", "client-3", "client-4"}
	for _, n := range names {
		if _, err := ca.Issue(pki.IssueOptions{Name: n, Role: pki.Client}); err != nil {
			t.Fatal(err)
		}
	}
	load := func(n string) *pki.Identity {
		id, err := pki.LoadIdentity(filepath.Join(dir, n+".crt"), filepath.Join(dir, n+".key"), filepath.Join(dir, "ca.crt"))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	task := secureTask()
	task.Secagg.Roster = nil
	for i, n := range names {
		task.Secagg.Roster = append(task.Secagg.Roster, &fedpb.SecAggMember{Id: uint32(i + 1), Client: n})
	}
	task.Secagg.Quant.Clip = 10
	q, err := secround.Quantizer(task.Secagg, 0)
	if err != nil {
		t.Fatal(err)
	}
	task.Secagg.Length = uint32(q.Padded())
	m0 := model0()
	task.ProtocolVersion, task.ModelVersion, task.DeadlineUnixMs = fedpb.ProtocolVersion, wire.Version(m0.Header()), time.Now().Add(time.Hour).UnixMilli()
	md, err := secround.ModelDigest(task.ModelVersion)
	if err != nil {
		t.Fatal(err)
	}
	params, err := secround.Params(task.Secagg, md)
	if err != nil {
		t.Fatal(err)
	}
	// advert returns id's advert signed by signer.
	advert := func(id uint32, signer crypto.Signer) masking.KeyAdvert {
		_, ad, err := masking.NewClient(masking.ClientConfig{ID: id, Signer: signer, Keys: masking.StaticKeys{}}, params, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return *ad
	}
	signer := func(n string) crypto.Signer { return load(n).Cert.PrivateKey.(crypto.Signer) }
	der := func(n string) []byte { return load(n).Leaf.Raw }
	relay := func(ads []masking.KeyAdvert, certs []string) *fedpb.SecAggAdverts {
		b, err := masking.EncodeAdverts(params.RoundID, ads)
		if err != nil {
			t.Fatal(err)
		}
		out := &fedpb.SecAggAdverts{Adverts: b}
		for i, a := range ads {
			out.Certs = append(out.Certs, &fedpb.SecAggCert{Id: a.From, Der: der(certs[i])})
		}
		return out
	}
	genuine := func() ([]masking.KeyAdvert, []string) {
		return []masking.KeyAdvert{advert(2, signer("client-2")), advert(3, signer("client-3")), advert(4, signer("client-4"))},
			[]string{"client-2", "client-3", "client-4"}
	}
	for _, tc := range []struct {
		name   string
		tamper func(ads []masking.KeyAdvert, certs []string)
		want   string
	}{
		{"genuine", func([]masking.KeyAdvert, []string) {}, ""},
		{"keys replaced", func(ads []masking.KeyAdvert, _ []string) {
			k, _ := ecdh.X25519().GenerateKey(rand.Reader)
			copy(ads[0].MaskKey[:], k.PublicKey().Bytes())
		}, "not signed by its key"},
		{"signed by the coordinator", func(ads []masking.KeyAdvert, certs []string) {
			ads[0] = advert(2, signer("coordinator"))
			certs[0] = "coordinator"
		}, "client 2's certificate"},
		{"another client's certificate", func(ads []masking.KeyAdvert, certs []string) {
			ads[0] = advert(2, signer("client-3"))
			certs[0] = "client-3"
		}, `is "client-3"'s`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ads, certs := genuine()
			tc.tamper(ads, certs)
			k := &keyThief{task: task, relay: func() *fedpb.SecAggAdverts { return relay(ads, certs) }, advert: make(chan struct{})}
			sid := load("coordinator")
			srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(pki.ServerTLS(sid, nil))))
			fedpb.RegisterCoordinatorServer(srv, k)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go srv.Serve(ln)
			defer srv.Stop()
			id := load("client-1")
			pol := policy()
			pol.SecAgg = client.SecAggPolicy{Require: true, MinHonest: 3}
			cdir := filepath.Join(t.TempDir(), "client-1")
			c, err := client.New(client.Options{Addr: ln.Addr().String(), Creds: credentials.NewTLS(pki.ClientTLS(id, "localhost")), Policy: pol,
				Identity: id, Dir: cdir, LedgerDir: filepath.Join(cdir, "ledgers"), DataSet: "client-1", Trainer: &planTrainer{sigma: 2, q: 0.1},
				ReconnectFor: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = c.Run(ctx)
			k.mu.Lock()
			shares := k.shares
			k.mu.Unlock()
			if tc.want == "" {
				if shares != 1 {
					t.Fatalf("with genuine adverts the client sent %d shares (%v)", shares, err)
				}
				return
			}
			if !errors.Is(err, client.ErrSecAgg) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("the client ended with %v; want ErrSecAgg naming %q", err, tc.want)
			}
			if shares != 0 {
				t.Fatal("the client sent shares to a coordinator that substituted keys")
			}
		})
	}
}
