package masking

import (
	"bytes"
	"crypto/ecdh"
	"crypto/ed25519"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

// roundAt drives an honest round of n clients (all complete) up to the
// unmasking request and returns the parties, for tests that then play a
// malicious coordinator or client.
type liveRound struct {
	f       *fixture
	srv     *Server
	clients map[uint32]*Client
	ads     map[uint32][]KeyAdvert      // relayed to each client
	shares  map[uint32][]EncryptedShare // relayed to each client
	inputs  map[uint32][]uint32
	masked  map[uint32]*MaskedInput
}

// upTo plays the honest round up to and including step s (1: adverts
// relayed, 2: shares relayed, 3: masked inputs sent), with the clients in
// drop leaving right after step 2.
func upTo(t *testing.T, f *fixture, s int, drop []uint32, r io.Reader) *liveRound {
	t.Helper()
	lr := &liveRound{f: f, clients: map[uint32]*Client{}, ads: map[uint32][]KeyAdvert{},
		shares: map[uint32][]EncryptedShare{}, inputs: map[uint32][]uint32{}, masked: map[uint32]*MaskedInput{}}
	var err error
	if lr.srv, err = NewServer(f.p, f.keys); err != nil {
		t.Fatal(err)
	}
	for _, id := range f.p.Roster {
		c, ad, err := NewClient(f.config(id), f.p, r)
		if err != nil {
			t.Fatal(err)
		}
		if err := lr.srv.ReceiveAdvert(ad); err != nil {
			t.Fatal(err)
		}
		lr.clients[id] = c
	}
	for _, id := range f.p.Roster {
		if lr.ads[id], err = lr.srv.AdvertsFor(id); err != nil {
			t.Fatal(err)
		}
	}
	if s < 2 {
		return lr
	}
	for _, id := range f.p.Roster {
		sh, err := lr.clients[id].ShareKeys(lr.ads[id], r)
		if err != nil {
			t.Fatal(err)
		}
		if err := lr.srv.ReceiveShares(id, sh); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range f.p.Roster {
		if lr.shares[id], err = lr.srv.SharesFor(id); err != nil {
			t.Fatal(err)
		}
	}
	if s < 3 {
		return lr
	}
	for i, id := range f.p.Roster {
		if slices.Contains(drop, id) {
			continue
		}
		in := make([]uint32, f.p.Length)
		for j := range in {
			in[j] = uint32(1000*i + j)
		}
		m, err := lr.clients[id].MaskInput(lr.shares[id], in)
		if err != nil {
			t.Fatal(err)
		}
		if err := lr.srv.ReceiveMasked(m); err != nil {
			t.Fatal(err)
		}
		lr.inputs[id], lr.masked[id] = in, m
	}
	return lr
}

func wantRefusal(t *testing.T, err error, words ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("accepted; want a refusal")
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("error %q does not say %q", err, w)
		}
	}
}

// TestSubstitutedKeyRefused plays a coordinator that replaces a
// neighbour's X25519 keys with its own (the man in the middle that would
// let it unmask that neighbour's pairwise masks): with the original
// signature, with a signature by the coordinator's own key, and by
// re-signing with another client's key. Both the client and an honest
// server refuse.
func TestSubstitutedKeyRefused(t *testing.T) {
	f := newFixture(t, 5, 4, 3, 4, 10)
	r := testRand(11)
	victim, target := f.p.Roster[0], f.p.Roster[1]
	var evil [32]byte
	io.ReadFull(r, evil[:])
	mallory, err := newX25519Key(r)
	if err != nil {
		t.Fatal(err)
	}
	var mk [32]byte
	copy(mk[:], mallory.PublicKey().Bytes())
	_, serverSK, _ := ed25519.GenerateKey(r)
	digest, _ := f.p.Digest()
	for _, tc := range []struct {
		name  string
		forge func(a *KeyAdvert)
	}{
		{"mask key swapped, signature kept", func(a *KeyAdvert) { a.MaskKey = mk }},
		{"encryption key swapped, signature kept", func(a *KeyAdvert) { a.EncKey = mk }},
		{"signed by the coordinator", func(a *KeyAdvert) {
			a.MaskKey = mk
			a.Signature = ed25519.Sign(serverSK, a.signedBytes(&digest))
		}},
		{"signed by another client", func(a *KeyAdvert) {
			a.MaskKey = mk
			a.Signature = ed25519.Sign(f.signers[f.p.Roster[2]], a.signedBytes(&digest))
		}},
		{"advert of another round", func(a *KeyAdvert) {
			a.RoundID[0] ^= 1
			a.Signature = ed25519.Sign(f.signers[a.From], a.signedBytes(&digest))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lr := upTo(t, f, 1, nil, r)
			ads := slices.Clone(lr.ads[victim])
			i := slices.IndexFunc(ads, func(a KeyAdvert) bool { return a.From == target })
			ads[i].Signature = slices.Clone(ads[i].Signature)
			tc.forge(&ads[i])
			_, err := lr.clients[victim].ShareKeys(ads, r)
			wantRefusal(t, err, "refused")
			// The refusal left the client able to take the honest adverts.
			if _, err := lr.clients[victim].ShareKeys(lr.ads[victim], r); err != nil {
				t.Fatalf("after a refusal the honest adverts were refused: %v", err)
			}
			// An honest server refuses the forged advert too.
			srv, _ := NewServer(f.p, f.keys)
			if err := srv.ReceiveAdvert(&ads[i]); err == nil {
				t.Fatal("server accepted a forged advertisement")
			}
		})
	}
	// A coordinator that gives the target other parameters (a lower
	// threshold, here) splits the round: the target's advertisement,
	// signed over its parameters, is refused by the victim.
	t.Run("split view of the parameters", func(t *testing.T) {
		g := *f
		g.p.Roster = slices.Clone(f.p.Roster)
		g.p.Degree, g.p.Threshold = 2, 2 // 3 holders, threshold 2
		g.p.Roster = g.p.Roster[:3]
		lr := upTo(t, f, 1, nil, r)
		_, ad, err := NewClient(g.config(target), g.p, r)
		if err != nil {
			t.Fatal(err)
		}
		ads := slices.Clone(lr.ads[victim])
		i := slices.IndexFunc(ads, func(a KeyAdvert) bool { return a.From == target })
		ads[i] = *ad
		_, err = lr.clients[victim].ShareKeys(ads, r)
		wantRefusal(t, err, "parameters", "refused")
	})
	// An advert from a client outside the victim's neighbourhood is
	// refused (sparse graph).
	fs := newFixture(t, 10, 4, 3, 4, 12)
	lr := upTo(t, fs, 1, nil, r)
	v := fs.p.Roster[0]
	var outsider uint32
	for _, id := range fs.p.Roster[1:] {
		if !lr.srv.Graph().Adjacent(v, id) {
			outsider = id
		}
	}
	extra, _ := lr.srv.AdvertsFor(lr.srv.Graph().Neighbours(outsider)[0])
	oi := slices.IndexFunc(extra, func(a KeyAdvert) bool { return a.From == outsider })
	_, err = lr.clients[v].ShareKeys(append(slices.Clone(lr.ads[v]), extra[oi]), r)
	wantRefusal(t, err, "not a neighbour")
}

// TestReplayedShareRefused replays and duplicates shares at every place a
// share travels.
func TestReplayedShareRefused(t *testing.T) {
	f := newFixture(t, 5, 4, 3, 4, 20)
	r := testRand(21)
	me := f.p.Roster[0]

	t.Run("duplicated relayed share", func(t *testing.T) {
		lr := upTo(t, f, 2, nil, r)
		sh := append(slices.Clone(lr.shares[me]), lr.shares[me][0])
		_, err := lr.clients[me].MaskInput(sh, make([]uint32, f.p.Length))
		wantRefusal(t, err, "replay")
	})
	t.Run("share of a previous round", func(t *testing.T) {
		old := upTo(t, f, 2, nil, r)
		g := *f
		g.p.RoundID[0] ^= 0xff
		lr := upTo(t, &g, 2, nil, r)
		for _, keepRound := range []bool{false, true} {
			sh := slices.Clone(lr.shares[me])
			sh[1] = old.shares[me][1]
			if keepRound {
				sh[1].RoundID = g.p.RoundID // relabelled: the AEAD still refuses
			}
			_, err := lr.clients[me].MaskInput(sh, make([]uint32, f.p.Length))
			wantRefusal(t, err, "refused")
		}
	})
	t.Run("share redirected to another recipient", func(t *testing.T) {
		lr := upTo(t, f, 2, nil, r)
		other := f.p.Roster[1]
		sh := slices.Clone(lr.shares[me])
		i := slices.IndexFunc(lr.shares[other], func(s EncryptedShare) bool { return s.From != me })
		stolen := lr.shares[other][i]
		stolen.To = me
		j := slices.IndexFunc(sh, func(s EncryptedShare) bool { return s.From == stolen.From })
		sh[j] = stolen
		_, err := lr.clients[me].MaskInput(sh, make([]uint32, f.p.Length))
		wantRefusal(t, err, "authentication")
	})
	t.Run("server: shares, masked input and response sent twice", func(t *testing.T) {
		srv, _ := NewServer(f.p, f.keys)
		cs := map[uint32]*Client{}
		for _, id := range f.p.Roster {
			c, ad, _ := NewClient(f.config(id), f.p, r)
			cs[id] = c
			if err := srv.ReceiveAdvert(ad); err != nil {
				t.Fatal(err)
			}
			wantRefusal(t, srv.ReceiveAdvert(ad), "second advertisement")
		}
		for _, id := range f.p.Roster {
			ads, _ := srv.AdvertsFor(id)
			sh, err := cs[id].ShareKeys(ads, r)
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.ReceiveShares(id, sh); err != nil {
				t.Fatal(err)
			}
			wantRefusal(t, srv.ReceiveShares(id, sh), "replay")
		}
		for _, id := range f.p.Roster {
			sh, _ := srv.SharesFor(id)
			m, err := cs[id].MaskInput(sh, make([]uint32, f.p.Length))
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.ReceiveMasked(m); err != nil {
				t.Fatal(err)
			}
			wantRefusal(t, srv.ReceiveMasked(m), "replay")
		}
		req, _ := srv.UnmaskRequest()
		resp, err := cs[me].Unmask(req)
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.ReceiveUnmask(resp); err != nil {
			t.Fatal(err)
		}
		wantRefusal(t, srv.ReceiveUnmask(resp), "replay")
		// A response of another round is refused too.
		forged := *resp
		forged.From = f.p.Roster[1]
		forged.RoundID[0] ^= 1
		wantRefusal(t, srv.ReceiveUnmask(&forged), "another round")
		// A share sent twice inside one response is refused.
		forged = *resp
		forged.From = f.p.Roster[1]
		forged.SelfShares = append(slices.Clone(resp.SelfShares[:1]), resp.SelfShares[0])
		wantRefusal(t, srv.ReceiveUnmask(&forged), "two shares")
	})
}

// TestBothSharesRefused plays a coordinator that asks for both secrets of
// one client, which would let it remove all of that client's masks.
func TestBothSharesRefused(t *testing.T) {
	f := newFixture(t, 5, 4, 3, 4, 30)
	r := testRand(31)
	lr := upTo(t, f, 3, nil, r)
	me, victim := f.p.Roster[0], f.p.Roster[3]
	honest, err := lr.srv.UnmaskRequest()
	if err != nil {
		t.Fatal(err)
	}
	both := &UnmaskRequest{RoundID: honest.RoundID, Survivors: honest.Survivors, Dropped: []uint32{victim}}
	_, err = lr.clients[me].Unmask(both)
	wantRefusal(t, err, "both survivor and dropped", "refused")
	for _, bad := range []*UnmaskRequest{
		{RoundID: honest.RoundID, Survivors: append(slices.Clone(honest.Survivors), honest.Survivors[1])},
		{RoundID: honest.RoundID, Survivors: honest.Survivors[1:], Dropped: []uint32{me}},
		{RoundID: honest.RoundID, Survivors: append(slices.Clone(honest.Survivors), 999)},
	} {
		if _, err := lr.clients[me].Unmask(bad); err == nil {
			t.Fatalf("request %+v accepted", bad)
		}
	}
	// The refusals changed nothing: the honest request is answered once.
	resp, err := lr.clients[me].Unmask(honest)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.KeyShares) != 0 || len(resp.SelfShares) != 5 {
		t.Fatalf("honest response has %d key and %d self shares", len(resp.KeyShares), len(resp.SelfShares))
	}
	// A second request, now claiming the victim dropped, is refused: the
	// client never releases both shares of one client across requests.
	later := &UnmaskRequest{RoundID: honest.RoundID, Survivors: slices.DeleteFunc(slices.Clone(honest.Survivors), func(id uint32) bool { return id == victim }), Dropped: []uint32{victim}}
	_, err = lr.clients[me].Unmask(later)
	wantRefusal(t, err, "second unmasking request")
	// The server refuses key shares of a survivor (wrong kind).
	wrong := &UnmaskResponse{RoundID: honest.RoundID, From: f.p.Roster[1], KeyShares: []ShareOf{{Owner: victim}}}
	wantRefusal(t, lr.srv.ReceiveUnmask(wrong), "wrong kind")
}

// TestTooFewSurvivorsRevealNothing: with t − 1 survivors the server
// refuses to unmask, clients refuse a request listing fewer than t
// survivors, and a coordinator that pads the list with dropped clients to
// reach t still collects only t − 1 shares of every secret, which are
// consistent with every possible secret.
func TestTooFewSurvivorsRevealNothing(t *testing.T) {
	f := newFixture(t, 5, 4, 3, 4, 40)
	r := testRand(41)
	drop := f.p.Roster[2:] // 2 = t − 1 survivors
	lr := upTo(t, f, 3, drop, r)
	_, err := lr.srv.UnmaskRequest()
	if !errors.Is(err, ErrTooFewSurvivors) {
		t.Fatalf("server: %v, want ErrTooFewSurvivors", err)
	}
	if _, err := lr.srv.Sum(); err == nil {
		t.Fatal("server unmasked with t − 1 survivors")
	}
	alive := f.p.Roster[:2]
	short := &UnmaskRequest{RoundID: f.p.RoundID, Survivors: alive, Dropped: drop}
	for _, id := range alive {
		_, err := lr.clients[id].Unmask(short)
		wantRefusal(t, err, "fewer than the threshold")
	}
	// The malicious coordinator claims a dropped client survived.
	padded := &UnmaskRequest{RoundID: f.p.RoundID, Survivors: append(slices.Clone(alive), drop[0]), Dropped: drop[1:]}
	collected := map[uint32]map[uint32]fieldShare{} // owner → holder → share
	for _, id := range alive {
		resp, err := lr.clients[id].Unmask(padded)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range [][]ShareOf{resp.SelfShares, resp.KeyShares} {
			for _, s := range l {
				if collected[s.Owner] == nil {
					collected[s.Owner] = map[uint32]fieldShare{}
				}
				collected[s.Owner][id] = s.Value
			}
		}
	}
	// The only responding holders are the two survivors: every secret has
	// at most t − 1 = 2 shares. For each, and for two different target
	// secrets, a third share at a non-responding holder's point exists
	// that makes reconstruction yield the target: the shares held are
	// consistent with every secret.
	for owner, m := range collected {
		if len(m) > f.p.Threshold-1 {
			t.Fatalf("the coordinator holds %d shares of client %d's secrets", len(m), owner)
		}
		for _, target := range [][secretSize]byte{{}, {1, 2, 3, 0xff}} {
			ids := sortedKeys(m)
			forgedAt := drop[len(drop)-1]
			forged, err := forgeShare(m, ids, forgedAt, target)
			if err != nil {
				t.Fatal(err)
			}
			m2 := map[uint32]fieldShare{forgedAt: forged}
			for _, id := range ids {
				m2[id] = m[id]
			}
			got, err := reconstruct(m2, sortedKeys(m2), len(m2))
			if err != nil {
				t.Fatal(err)
			}
			if got != target {
				t.Fatalf("client %d: the forged share reconstructs %x, want %x", owner, got, target)
			}
		}
	}
}

// forgeShare returns the share at holder h's point of the polynomial
// through (0, target) and the given shares.
func forgeShare(m map[uint32]fieldShare, ids []uint32, h uint32, target [secretSize]byte) (fieldShare, error) {
	xs := []uint64{0}
	ys := []fieldShare{fieldShare(chunks(&target))}
	for _, id := range ids {
		xs = append(xs, point(id))
		ys = append(ys, m[id])
	}
	return interpolate(xs, ys, point(h))
}

// TestPolicyRefusesLowThreshold: the owner's minimum threshold beats the
// coordinator's parameters.
func TestPolicyRefusesLowThreshold(t *testing.T) {
	f := newFixture(t, 7, 6, 4, 4, 50)
	cfg := f.config(f.p.Roster[0])
	cfg.MinThreshold = 5
	_, _, err := NewClient(cfg, f.p, testRand(51))
	wantRefusal(t, err, "below this client's minimum")
	bad := f.p
	bad.Threshold = 3 // 2t ≤ k + 1
	_, _, err = NewClient(f.config(f.p.Roster[0]), bad, testRand(52))
	wantRefusal(t, err, "exceed half")
}

// TestMaskedInputHidesInput: a single masked input reveals nothing
// visible: changing the input by one in one coordinate leaves the other
// coordinates of the masked vector unrelated to the input (each is the
// input plus independent keystream words), and two clients' masked
// versions of the same input differ everywhere.
func TestMaskedInputHidesInput(t *testing.T) {
	f := newFixture(t, 5, 4, 3, 256, 60)
	lr := upTo(t, f, 3, nil, testRand(61))
	a, b := lr.masked[f.p.Roster[0]], lr.masked[f.p.Roster[1]]
	same := 0
	for i := range a.Values {
		if a.Values[i] == lr.inputs[f.p.Roster[0]][i] {
			same++
		}
		if a.Values[i]-lr.inputs[f.p.Roster[0]][i] == b.Values[i]-lr.inputs[f.p.Roster[1]][i] {
			same++
		}
	}
	if same > 1 { // each equality has probability 2^−32
		t.Fatalf("%d masked coordinates equal the input or another client's mask", same)
	}
}

// TestSplitRequestsCannotGetBothSecrets plays a coordinator that tells
// some holders of a victim's secrets "the victim survived" and the others
// "the victim dropped", for every split of the holders. Because 2t > k+1
// (Params.Validate) it never collects t shares of both the victim's
// self-mask seed and its mask key, so it cannot strip all of the victim's
// masks; the test reconstructs whatever reaches t and checks that at
// most one secret does.
func TestSplitRequestsCannotGetBothSecrets(t *testing.T) {
	f := newFixture(t, 5, 4, 3, 4, 80)
	r := testRand(81)
	victim := f.p.Roster[2]
	var others []uint32
	for _, id := range f.p.Roster {
		if id != victim {
			others = append(others, id)
		}
	}
	reached := 0
	for split := range 1 << len(others) {
		lr := upTo(t, f, 3, nil, r)
		honest, err := lr.srv.UnmaskRequest()
		if err != nil {
			t.Fatal(err)
		}
		dropReq := &UnmaskRequest{RoundID: honest.RoundID,
			Survivors: slices.DeleteFunc(slices.Clone(honest.Survivors), func(id uint32) bool { return id == victim }),
			Dropped:   []uint32{victim}}
		self, key := map[uint32]fieldShare{}, map[uint32]fieldShare{}
		// The victim itself only ever answers as a survivor.
		ask := map[uint32]*UnmaskRequest{victim: honest}
		for i, id := range others {
			if split>>i&1 == 1 {
				ask[id] = dropReq
			} else {
				ask[id] = honest
			}
		}
		for id, req := range ask {
			resp, err := lr.clients[id].Unmask(req)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range resp.SelfShares {
				if s.Owner == victim {
					self[id] = s.Value
				}
			}
			for _, s := range resp.KeyShares {
				if s.Owner == victim {
					key[id] = s.Value
				}
			}
		}
		if len(self) >= f.p.Threshold && len(key) >= f.p.Threshold {
			t.Fatalf("split %04b: the coordinator holds %d seed shares and %d key shares of the victim", split, len(self), len(key))
		}
		if len(key) >= f.p.Threshold {
			// It can rebuild the mask key; then the seed must be out of reach.
			skb, err := reconstruct(key, sortedKeys(key), f.p.Threshold)
			if err != nil {
				t.Fatal(err)
			}
			adv := lr.srv.adverts[victim]
			sk, _ := ecdhKey(skb)
			if !slices.Equal(sk, adv.MaskKey[:]) {
				t.Fatal("reconstructed key does not match")
			}
			reached++
		}
	}
	if reached == 0 {
		t.Fatal("no split reached the key threshold: the test exercises nothing")
	}
}

func ecdhKey(b [secretSize]byte) ([]byte, error) {
	k, err := newX25519Key(bytes.NewReader(b[:]))
	if err != nil {
		return nil, err
	}
	return k.PublicKey().Bytes(), nil
}

// TestColludersBound: a coordinator colluding with c of a victim's
// neighbours tells some honest holders "the victim survived" and the
// others "it dropped". Up to Params.ToleratedColluders colluders it never
// gets t shares of both secrets, for any split; one colluder more and some
// split gives both, and the test then recovers the victim's input exactly
// — the bound is tight, which is why the federation must choose t with
// its collusion assumption in mind.
func TestColludersBound(t *testing.T) {
	for _, tc := range []struct{ n, k, t int }{{5, 4, 3}, {7, 6, 5}} {
		f := newFixture(t, tc.n, tc.k, tc.t, 6, uint64(90+tc.n))
		tol := f.p.ToleratedColluders()
		for c := 0; c <= tol+1; c++ {
			broken := attackWithColluders(t, f, c, testRand(uint64(91+c)))
			if c <= tol && broken {
				t.Fatalf("n=%d k=%d t=%d: %d colluders (tolerated %d) recovered the victim's input", tc.n, tc.k, tc.t, c, tol)
			}
			if c == tol+1 && !broken {
				t.Fatalf("n=%d k=%d t=%d: %d colluders could not attack: the stated tolerance is not tight", tc.n, tc.k, tc.t, c)
			}
		}
	}
}

// attackWithColluders tries every split of the victim's honest holders
// and reports whether some split recovered the victim's exact input.
func attackWithColluders(t *testing.T, f *fixture, c int, r io.Reader) bool {
	t.Helper()
	victim := f.p.Roster[0]
	var colluders, honest []uint32
	for _, id := range f.p.Roster[1:] {
		if len(colluders) < c {
			colluders = append(colluders, id)
		} else {
			honest = append(honest, id)
		}
	}
	for split := range 1 << len(honest) {
		lr := upTo(t, f, 3, nil, r)
		req, err := lr.srv.UnmaskRequest()
		if err != nil {
			t.Fatal(err)
		}
		dropReq := &UnmaskRequest{RoundID: req.RoundID,
			Survivors: slices.DeleteFunc(slices.Clone(req.Survivors), func(id uint32) bool { return id == victim }),
			Dropped:   []uint32{victim}}
		self, key := map[uint32]fieldShare{}, map[uint32]fieldShare{}
		take := func(id uint32, resp *UnmaskResponse) {
			for _, s := range resp.SelfShares {
				if s.Owner == victim {
					self[id] = s.Value
				}
			}
			for _, s := range resp.KeyShares {
				if s.Owner == victim {
					key[id] = s.Value
				}
			}
		}
		// Colluders hand over both of their shares (read from their state).
		for _, id := range colluders {
			h := lr.clients[id].held[victim]
			self[id], key[id] = h.self, h.key
		}
		resp, err := lr.clients[victim].Unmask(req)
		if err != nil {
			t.Fatal(err)
		}
		take(victim, resp)
		for i, id := range honest {
			q := req
			if split>>i&1 == 1 {
				q = dropReq
			}
			resp, err := lr.clients[id].Unmask(q)
			if err != nil {
				t.Fatal(err)
			}
			take(id, resp)
		}
		if len(self) < f.p.Threshold || len(key) < f.p.Threshold {
			continue
		}
		seed, err1 := reconstruct(self, sortedKeys(self), f.p.Threshold)
		skb, err2 := reconstruct(key, sortedKeys(key), f.p.Threshold)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		// Strip every mask from the victim's masked input.
		sk, err := newX25519Key(bytes.NewReader(skb[:]))
		if err != nil {
			t.Fatal(err)
		}
		y := slices.Clone(lr.masked[victim].Values)
		addMask(y, &seed, -1)
		for _, j := range lr.clients[victim].masked {
			adv := lr.srv.adverts[j]
			pk, _ := ecdhPublic(adv.MaskKey[:])
			s, err := pairSeed(sk, pk, &f.p.RoundID, victim, j)
			if err != nil {
				t.Fatal(err)
			}
			sign := -1
			if victim > j {
				sign = 1
			}
			addMask(y, &s, sign)
		}
		if slices.Equal(y, lr.inputs[victim]) {
			return true
		}
		t.Fatal("both secrets reconstructed but the input did not come out: the attack code is wrong")
	}
	return false
}

func ecdhPublic(b []byte) (*ecdh.PublicKey, error) { return ecdh.X25519().NewPublicKey(b) }
