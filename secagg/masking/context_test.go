package masking

import (
	"errors"
	"slices"
	"testing"
)

// TestSplitContextRefused plays a coordinator that gives two clients the
// same masking parameters but different configurations beyond them (the
// caller's Context: in the federation a different distributed DP plan or
// quantiser): the victim refuses the target's advertisement naming the
// mismatch (ErrParamsMismatch), as does an honest server; relabelling the
// advertisement's Params field with the victim's digest only turns the
// refusal into a bad signature; and the victim, having refused, still
// takes the round's consistent advertisements.
func TestSplitContextRefused(t *testing.T) {
	f := newFixture(t, 5, 4, 3, 4, 40)
	f.p.Context[0] = 1
	r := testRand(41)
	victim, target := f.p.Roster[0], f.p.Roster[1]
	other := *f
	other.p.Roster = slices.Clone(f.p.Roster)
	other.p.Context[0] = 2
	_, ad, err := NewClient(other.config(target), other.p, r)
	if err != nil {
		t.Fatal(err)
	}
	vd, _ := f.p.Digest()
	if od, _ := other.p.Digest(); od == vd || ad.Params != od {
		t.Fatal("the context does not enter the digest the advertisement carries")
	}
	for _, tc := range []struct {
		name   string
		edit   func(a *KeyAdvert)
		want   string
		isSent bool
	}{
		{"signed over another context", func(*KeyAdvert) {}, "different configurations", true},
		{"Params relabelled with the victim's digest", func(a *KeyAdvert) { a.Params = vd }, "not signed by its key", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lr := upTo(t, f, 1, nil, r)
			forged := *ad
			forged.Signature = slices.Clone(ad.Signature)
			tc.edit(&forged)
			ads := slices.Clone(lr.ads[victim])
			i := slices.IndexFunc(ads, func(a KeyAdvert) bool { return a.From == target })
			ads[i] = forged
			_, err := lr.clients[victim].ShareKeys(ads, r)
			wantRefusal(t, err, tc.want, "refused")
			if errors.Is(err, ErrParamsMismatch) != tc.isSent {
				t.Fatalf("errors.Is(err, ErrParamsMismatch) = %v, want %v (%v)", !tc.isSent, tc.isSent, err)
			}
			srv, _ := NewServer(f.p, f.keys)
			if err := srv.ReceiveAdvert(&forged); err == nil {
				t.Fatal("an honest server accepted an advertisement of another configuration")
			}
			if _, err := lr.clients[victim].ShareKeys(lr.ads[victim], r); err != nil {
				t.Fatalf("after the refusal the consistent adverts were refused: %v", err)
			}
		})
	}
}

// TestCheckSharesLeavesTheClientUnchanged: CheckShares refuses what
// MaskInput refuses (a replayed share, a share of another recipient,
// too few shares) and accepts what it accepts, and in neither case
// moves the client, which then masks its input from the honest shares.
func TestCheckSharesLeavesTheClientUnchanged(t *testing.T) {
	f := newFixture(t, 5, 4, 3, 4, 42)
	r := testRand(43)
	me := f.p.Roster[0]
	lr := upTo(t, f, 2, nil, r)
	c := lr.clients[me]
	honest := lr.shares[me]
	redirected := slices.Clone(honest)
	redirected[0].To = f.p.Roster[1]
	for _, tc := range []struct {
		name   string
		shares []EncryptedShare
		want   string
	}{
		{"replayed share", append(slices.Clone(honest), honest[0]), "replay"},
		{"share of another recipient", redirected, "addressed to client"},
		{"too few shares", honest[:1], "fewer than t − 1"},
	} {
		err := c.CheckShares(tc.shares)
		if err == nil {
			t.Fatalf("%s: CheckShares accepted", tc.name)
		}
		wantRefusal(t, err, tc.want)
		if _, merr := c.MaskInput(tc.shares, make([]uint32, f.p.Length)); merr == nil || merr.Error() != err.Error() {
			t.Fatalf("%s: MaskInput says %v, CheckShares %v", tc.name, merr, err)
		}
	}
	if err := c.CheckShares(honest); err != nil {
		t.Fatal(err)
	}
	if err := c.CheckShares(honest); err != nil {
		t.Fatalf("a second check of the same shares: %v", err)
	}
	m, err := c.MaskInput(honest, make([]uint32, f.p.Length))
	if err != nil {
		t.Fatal(err)
	}
	if m.From != me {
		t.Fatalf("masked input from %d", m.From)
	}
	if err := c.CheckShares(honest); err == nil {
		t.Fatal("CheckShares accepted shares after the input was masked")
	}
}
