package coord_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/secround"
	"github.com/veil-privacy/veil/secagg/masking"
)

func signer(t *testing.T, h *harness, name string) crypto.Signer {
	t.Helper()
	id, err := pki.LoadIdentity(filepath.Join(h.dir, name+".crt"), filepath.Join(h.dir, name+".key"), filepath.Join(h.dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	return id.Cert.PrivateKey.(crypto.Signer)
}

func secSend(ctx context.Context, t *testing.T, a fedpb.CoordinatorClient, m *fedpb.SecAggMessage) *fedpb.SecAggAck {
	t.Helper()
	m.ProtocolVersion = fedpb.ProtocolVersion
	ack, err := a.SecAggSend(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	return ack
}

// TestMisbehavingClientIsRefusedAndTheRoundCompletes runs client-4 by
// hand against three honest clients. Its advert for client-1's id, and
// its advert signed by client-3's key (a substituted key), are refused;
// its own is accepted. A second, different set of shares (a replay of
// altered shares) is refused. Its masked vector of the wrong size and
// one of the right size that does not decode are refused with a clear
// reason, and it sends nothing else: the round completes for the three
// honest clients (client-4 dropped after sharing, its pairwise masks
// recovered).
func TestMisbehavingClientIsRefusedAndTheRoundCompletes(t *testing.T) {
	h := startSecure(t, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan map[string]error, 1)
	go func() {
		errs := map[string]error{}
		cs := map[string]*client.Client{}
		for i, name := range secNames[:3] {
			cs[name] = secClient(t, h, name, vecTrainer{base: float32(i + 1)}, nil, nil)
		}
		ch := make(chan struct {
			n string
			e error
		}, 3)
		for n, c := range cs {
			go func() {
				ch <- struct {
					n string
					e error
				}{n, c.Run(ctx)}
			}()
		}
		for range cs {
			r := <-ch
			errs[r.n] = r.e
		}
		done <- errs
	}()
	a := h.api(t, "client-4")
	if err := join(ctx, a, 100); err != nil {
		t.Fatal(err)
	}
	stream, err := a.Subscribe(ctx, &fedpb.SubscribeRequest{ProtocolVersion: fedpb.ProtocolVersion})
	if err != nil {
		t.Fatal(err)
	}
	p, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	task := p.GetTask()
	sa := task.GetSecagg()
	md, err := secround.ModelDigest(task.GetModelVersion())
	if err != nil {
		t.Fatal(err)
	}
	params, err := secround.Params(sa, md)
	if err != nil {
		t.Fatal(err)
	}
	me, _ := secround.ID(sa, "client-4")
	other, _ := secround.ID(sa, "client-1")
	id4, _ := pki.LoadIdentity(filepath.Join(h.dir, "client-4.crt"), filepath.Join(h.dir, "client-4.key"), filepath.Join(h.dir, "ca.crt"))
	dir := secround.NewDirectory(sa, id4.Pool)
	advert := func(id uint32, s crypto.Signer) (*masking.Client, []byte) {
		mc, ad, err := masking.NewClient(masking.ClientConfig{ID: id, Signer: s, Keys: dir}, params, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := ad.MarshalBinary()
		return mc, b
	}
	refused := func(what string, ack *fedpb.SecAggAck, want string) {
		t.Helper()
		if ack.GetAccepted() || !strings.Contains(ack.GetReason(), want) {
			t.Fatalf("%s: accepted %v, reason %q; want refused with %q", what, ack.GetAccepted(), ack.GetReason(), want)
		}
	}
	_, b := advert(other, signer(t, h, "client-4"))
	refused("an advert for another client's id", secSend(ctx, t, a, &fedpb.SecAggMessage{Round: task.Round, Msg: &fedpb.SecAggMessage_Advert{Advert: b}}), "sent an advert for id")
	_, b = advert(me, signer(t, h, "client-3"))
	refused("an advert signed by another key", secSend(ctx, t, a, &fedpb.SecAggMessage{Round: task.Round, Msg: &fedpb.SecAggMessage_Advert{Advert: b}}), "not signed by its key")
	mc, b := advert(me, signer(t, h, "client-4"))
	if ack := secSend(ctx, t, a, &fedpb.SecAggMessage{Round: task.Round, Msg: &fedpb.SecAggMessage_Advert{Advert: b}}); !ack.GetAccepted() {
		t.Fatalf("the genuine advert was refused: %s", ack.GetReason())
	}
	// The neighbours' adverts, then shares.
	p, err = stream.Recv()
	if err != nil || p.GetSecagg().GetAdverts() == nil {
		t.Fatalf("expected the adverts: %v %v", p, err)
	}
	for _, c := range p.GetSecagg().GetAdverts().GetCerts() {
		if err := dir.Add(c.GetId(), c.GetDer()); err != nil {
			t.Fatal(err)
		}
	}
	_, ads, err := masking.DecodeAdverts(p.GetSecagg().GetAdverts().GetAdverts())
	if err != nil {
		t.Fatal(err)
	}
	shares, err := mc.ShareKeys(ads, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sb, _ := masking.EncodeShares(params.RoundID, shares)
	if ack := secSend(ctx, t, a, &fedpb.SecAggMessage{Round: task.Round, Msg: &fedpb.SecAggMessage_Shares{Shares: sb}}); !ack.GetAccepted() {
		t.Fatalf("the genuine shares were refused: %s", ack.GetReason())
	}
	shares[0].Ciphertext[0] ^= 1
	alt, _ := masking.EncodeShares(params.RoundID, shares)
	refused("a second, altered set of shares", secSend(ctx, t, a, &fedpb.SecAggMessage{Round: task.Round, Msg: &fedpb.SecAggMessage_Shares{Shares: alt}}), "replay")
	// The shares addressed to client-4, then malformed masked vectors.
	if p, err = stream.Recv(); err != nil || p.GetSecagg().GetShares() == nil {
		t.Fatalf("expected the shares: %v %v", p, err)
	}
	hdr := &fedpb.UpdateHeader{ProtocolVersion: fedpb.ProtocolVersion, Round: task.Round, ModelVersion: task.ModelVersion,
		Dp:     &fedpb.DPParams{NoiseMultiplier: 1, Clip: 1, SamplingRate: 0.1, Steps: 5, Delta: 1e-5, PrivacyUnit: "identity"},
		Masked: &fedpb.MaskedHeader{TotalBytes: 100}}
	resp, err := client.SendMasked(ctx, a, hdr, make([]byte, 100))
	if err != nil || resp.GetAccepted() || !strings.Contains(resp.GetReason(), "a masked vector of 100 bytes") {
		t.Fatalf("a masked vector of the wrong size: %v, %v", resp, err)
	}
	size := 4*int(params.Length) + 41
	hdr.Masked.TotalBytes = uint64(size)
	resp, err = client.SendMasked(ctx, a, hdr, make([]byte, size))
	if err != nil || resp.GetAccepted() || !strings.Contains(resp.GetReason(), "malformed") {
		t.Fatalf("a masked vector that does not decode: %v, %v", resp, err)
	}
	// client-4 now drops out.
	errs := <-done
	for n, err := range errs {
		if err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	if st, updates, reason, _ := roundRow(t, h.state, "client-1"); st != "done" || updates != 3 {
		t.Fatalf("round 1: %s with %d updates (%s), want done with the 3 honest clients", st, updates, reason)
	}
}

// TestStalledMaskedStreamIsEnded: a masked-vector stream that sends
// nothing is ended after StreamIdle (it holds no buffer).
func TestStalledMaskedStreamIsEnded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	testCA(t, dir)
	o := secOptions(t, dir, filepath.Join(t.TempDir(), "state.db"), 1)
	o.StreamIdle = 300 * time.Millisecond
	h := startHarnessOpts(t, o, dir, "127.0.0.1:0", nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := h.api(t, "client-1")
	if err := join(ctx, a, 100); err != nil {
		t.Fatal(err)
	}
	s, err := a.SubmitMasked(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = s.RecvMsg(new(fedpb.SubmitResponse))
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "sent nothing") {
		t.Fatalf("a stalled stream ended with %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("ended after %s", d)
	}
}
