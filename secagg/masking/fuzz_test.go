package masking

import (
	"bytes"
	"strings"
	"testing"
)

// Every decoder of untrusted bytes is fuzzed: it must never panic, and any
// input it accepts must re-encode to exactly the same bytes (one encoding
// per message, so no two byte strings mean the same thing).

func roundMessages(f testing.TB) (p Params, ad *KeyAdvert, ads []KeyAdvert, sh []EncryptedShare, m *MaskedInput, req *UnmaskRequest, resp *UnmaskResponse) {
	fx := newFixture(f, 5, 4, 3, 3, 70)
	r := testRand(71)
	srv, _ := NewServer(fx.p, fx.keys)
	cs := map[uint32]*Client{}
	for _, id := range fx.p.Roster {
		c, a, err := NewClient(fx.config(id), fx.p, r)
		if err != nil {
			f.Fatal(err)
		}
		cs[id] = c
		srv.ReceiveAdvert(a)
		ad = a
	}
	for _, id := range fx.p.Roster {
		ads, _ = srv.AdvertsFor(id)
		s, _ := cs[id].ShareKeys(ads, r)
		srv.ReceiveShares(id, s)
	}
	for _, id := range fx.p.Roster {
		sh, _ = srv.SharesFor(id)
		m, _ = cs[id].MaskInput(sh, []uint32{1, 2, 3})
		srv.ReceiveMasked(m)
	}
	req, _ = srv.UnmaskRequest()
	resp, _ = cs[fx.p.Roster[0]].Unmask(req)
	return fx.p, ad, ads, sh, m, req, resp
}

type binaryMessage interface {
	MarshalBinary() ([]byte, error)
	UnmarshalBinary([]byte) error
}

func fuzzMessage(f *testing.F, seed binaryMessage, fresh func() binaryMessage) {
	b, err := seed.MarshalBinary()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:len(b)-1])
	f.Add(append(bytes.Clone(b), 0))
	f.Fuzz(func(t *testing.T, in []byte) {
		m := fresh()
		if err := m.UnmarshalBinary(in); err != nil {
			return
		}
		out, err := m.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded message does not re-encode: %v", err)
		}
		if !bytes.Equal(in, out) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", in, out)
		}
	})
}

func FuzzParams(f *testing.F) {
	p, _, _, _, _, _, _ := roundMessages(f)
	fuzzMessage(f, &p, func() binaryMessage { return new(Params) })
}

func FuzzKeyAdvert(f *testing.F) {
	_, ad, _, _, _, _, _ := roundMessages(f)
	fuzzMessage(f, ad, func() binaryMessage { return new(KeyAdvert) })
}

func FuzzEncryptedShare(f *testing.F) {
	_, _, _, sh, _, _, _ := roundMessages(f)
	fuzzMessage(f, &sh[0], func() binaryMessage { return new(EncryptedShare) })
}

func FuzzMaskedInput(f *testing.F) {
	_, _, _, _, m, _, _ := roundMessages(f)
	fuzzMessage(f, m, func() binaryMessage { return new(MaskedInput) })
}

func FuzzUnmaskRequest(f *testing.F) {
	_, _, _, _, _, req, _ := roundMessages(f)
	fuzzMessage(f, req, func() binaryMessage { return new(UnmaskRequest) })
}

func FuzzUnmaskResponse(f *testing.F) {
	_, _, _, _, _, _, resp := roundMessages(f)
	fuzzMessage(f, resp, func() binaryMessage { return new(UnmaskResponse) })
}

func FuzzAdverts(f *testing.F) {
	p, _, ads, _, _, _, _ := roundMessages(f)
	b, err := EncodeAdverts(p.RoundID, ads)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:len(b)-3])
	f.Fuzz(func(t *testing.T, in []byte) {
		round, ads, err := DecodeAdverts(in)
		if err != nil {
			return
		}
		out, err := EncodeAdverts(round, ads)
		if err != nil || !bytes.Equal(in, out) {
			t.Fatalf("re-encoding differs (%v)", err)
		}
	})
}

func FuzzShares(f *testing.F) {
	p, _, _, sh, _, _, _ := roundMessages(f)
	b, err := EncodeShares(p.RoundID, sh)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:len(b)-3])
	f.Fuzz(func(t *testing.T, in []byte) {
		round, sh, err := DecodeShares(in)
		if err != nil {
			return
		}
		out, err := EncodeShares(round, sh)
		if err != nil || !bytes.Equal(in, out) {
			t.Fatalf("re-encoding differs (%v)", err)
		}
	})
}

// TestDecodersRefuseMalformed: every truncation of every message, a
// trailing byte and a wrong tag are refused with an error naming the
// message.
func TestDecodersRefuseMalformed(t *testing.T) {
	p, ad, _, sh, m, req, resp := roundMessages(t)
	for _, tc := range []struct {
		name  string
		msg   binaryMessage
		fresh func() binaryMessage
	}{
		{"round parameters", &p, func() binaryMessage { return new(Params) }},
		{"key advertisement", ad, func() binaryMessage { return new(KeyAdvert) }},
		{"encrypted share", &sh[0], func() binaryMessage { return new(EncryptedShare) }},
		{"masked input", m, func() binaryMessage { return new(MaskedInput) }},
		{"unmasking request", req, func() binaryMessage { return new(UnmaskRequest) }},
		{"unmasking response", resp, func() binaryMessage { return new(UnmaskResponse) }},
	} {
		b, err := tc.msg.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if err := tc.fresh().UnmarshalBinary(b); err != nil {
			t.Fatalf("%s: valid encoding refused: %v", tc.name, err)
		}
		bad := [][]byte{append(bytes.Clone(b), 0), append([]byte{b[0] ^ 1}, b[1:]...)}
		for n := range len(b) {
			bad = append(bad, b[:n])
		}
		for _, in := range bad {
			err := tc.fresh().UnmarshalBinary(in)
			if err == nil || !strings.Contains(err.Error(), tc.name) {
				t.Fatalf("%s: %d bytes: %v", tc.name, len(in), err)
			}
		}
	}
	// A share value outside the field is refused.
	b, _ := resp.MarshalBinary()
	for i := 33 + 4 + 4 + 4; i < 33+4+4+4+8; i++ {
		b[i] = 0xff
	}
	if err := new(UnmaskResponse).UnmarshalBinary(b); err == nil || !strings.Contains(err.Error(), "GF(2^61") {
		t.Fatalf("out-of-field share: %v", err)
	}
}
