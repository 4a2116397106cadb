package dphefed_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/veil-privacy/veil/fed/dphefed"
	"github.com/veil-privacy/veil/secagg/dphe"
	"github.com/veil-privacy/veil/secagg/paillier"
)

const (
	testCoords = 300
	testCount  = 2 // blocks each client selects (and DPHE's capacity)
)

// testUpdate is client i's update: two blocks of four values on the 2^-24
// grid (norm about 0.25, so nothing is clipped), zero elsewhere.
func testUpdate(i, lanes int) []float64 {
	u := make([]float64, testCoords)
	blocks := (testCoords + lanes - 1) / lanes
	for _, b := range []int{i % blocks, (i*5 + 3) % blocks} {
		for l := 0; l < 4; l++ {
			k := float64(1_500_000 + 1000*i + 17*l)
			if (i+l)%2 == 1 {
				k = -k
			}
			u[b*lanes+l] = math.Ldexp(k, -24)
		}
	}
	return u
}

// playRound runs one round with clients 1…n through the library halves:
// the coordinator's StartRound, each client's Contribute over its own
// connection, the coordinator's Receive and Aggregate, and Decrypt. It
// returns the sum, every byte the coordinator received or sent, the
// updates and the round.
func playRound(t *testing.T, h *harness, coord *dphefed.KeyGen, round uint64, n int) (*dphefed.Sum, [][]byte, [][]float64, *dphefed.Round) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var names []string
	for i := 1; i <= n; i++ {
		names = append(names, clientName(i))
	}
	r, err := dphefed.StartRound(ctx, coord, dphefed.RoundRequest{Round: round, Coordinates: testCoords, Capacity: testCount, Clients: names, Pack: true, Bound: 4, MaxUsers: 8})
	if err != nil {
		t.Fatal(err)
	}
	var seen [][]byte
	var updates [][]float64
	for i := 1; i <= n; i++ {
		upd := testUpdate(i, r.Packing.Lanes)
		updates = append(updates, upd)
		c, err := dphefed.Contribute(ctx, h.dial(t, clientName(i)), round, upd, dphefed.ContributeOptions{Privacy: clientPrivacy(t, testCount, byte(i))})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range c.Messages {
			seen = append(seen, m)
			if err := r.Receive(clientName(i), m); err != nil {
				t.Fatal(err)
			}
		}
	}
	agg, err := r.Aggregate()
	if err != nil {
		t.Fatal(err)
	}
	seen = append(seen, agg)
	sum, err := coord.Decrypt(ctx, agg)
	if err != nil {
		t.Fatal(err)
	}
	return sum, seen, updates, r
}

// TestDPHERoundEndToEnd runs 3 to 8 clients' contributions through a real
// key generator (gRPC, mutual TLS, loopback) and the coordinator's half:
// the decrypted sum is the clients' updates' sum (within their tiny
// noise), names every client, and nothing the coordinator received or
// sent holds a client's plaintext.
func TestDPHERoundEndToEnd(t *testing.T) {
	for _, n := range []int{3, 5, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			h := newHarness(t, n)
			coord := h.dial(t, "coordinator")
			sum, seen, updates, r := playRound(t, h, coord, 1, n)
			if len(sum.Clients) != n || !slices.IsSorted(sum.Clients) {
				t.Errorf("sum of clients %v, want all %d", sum.Clients, n)
			}
			want := make([]float64, testCoords)
			for _, u := range updates {
				for j, x := range u {
					want[j] += x
				}
			}
			for j := range want {
				if math.Abs(sum.Sum[j]-want[j]) > 1e-6 {
					t.Fatalf("coordinate %d: %v, want %v", j, sum.Sum[j], want[j])
				}
			}
			pk, frac, err := coord.PublicKey(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if leak := findPlaintext(seen, updates, pk, frac, r.Packing); leak != "" {
				t.Errorf("the coordinator's bytes hold a plaintext: %s", leak)
			}
		})
	}
}

// findPlaintext searches blobs for any encoding of the updates' values a
// plaintext would carry: each non-zero value's float64 bits and its
// fixed-point integer (both byte orders), and each non-zero block's packed
// plaintext (fixed width and minimal). It returns what it found, or "".
func findPlaintext(blobs [][]byte, updates [][]float64, pk *paillier.PublicKey, frac int, pack *dphe.Packing) string {
	w, _ := pack.LaneBits(frac)
	var needles [][]byte
	var names []string
	add := func(b []byte, what string) { needles, names = append(needles, b), append(names, what) }
	for ui, u := range updates {
		for b := 0; b*pack.Lanes < len(u); b++ {
			m := new(big.Int)
			block := u[b*pack.Lanes : min((b+1)*pack.Lanes, len(u))]
			for l := len(block) - 1; l >= 0; l-- {
				k := int64(math.Round(math.Ldexp(block[l], frac)))
				m.Lsh(m, uint(w)).Add(m, big.NewInt(k))
				if block[l] != 0 {
					add(binary.BigEndian.AppendUint64(nil, math.Float64bits(block[l])), fmt.Sprintf("update %d value %d (float64)", ui, b*pack.Lanes+l))
					add(binary.LittleEndian.AppendUint64(nil, math.Float64bits(block[l])), fmt.Sprintf("update %d value %d (float64 LE)", ui, b*pack.Lanes+l))
					add(binary.BigEndian.AppendUint64(nil, uint64(k)), fmt.Sprintf("update %d value %d (fixed point)", ui, b*pack.Lanes+l))
					add(binary.LittleEndian.AppendUint64(nil, uint64(k)), fmt.Sprintf("update %d value %d (fixed point LE)", ui, b*pack.Lanes+l))
				}
			}
			if m.Sign() == 0 {
				continue
			}
			if m.Sign() < 0 {
				m.Add(m, pk.N())
			}
			add(m.Bytes(), fmt.Sprintf("update %d block %d (packed plaintext)", ui, b))
			add(m.FillBytes(make([]byte, pk.CiphertextSize())), fmt.Sprintf("update %d block %d (packed, fixed width)", ui, b))
		}
	}
	for _, blob := range blobs {
		for i, nd := range needles {
			if bytes.Contains(blob, nd) {
				return names[i]
			}
		}
	}
	return ""
}

// TestPlaintextSearchFindsALeak: the search above finds an update sent in
// the clear, as fixed-point integers or as packed plaintexts, so its
// silence in TestDPHERoundEndToEnd means something.
func TestPlaintextSearchFindsALeak(t *testing.T) {
	h := newHarness(t, 3)
	coord := h.dial(t, "coordinator")
	_, seen, updates, r := playRound(t, h, coord, 1, 3)
	pk, frac, err := coord.PublicKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var clear []byte
	for _, x := range updates[1] {
		clear = binary.LittleEndian.AppendUint64(clear, uint64(int64(math.Round(math.Ldexp(x, frac)))))
	}
	if findPlaintext([][]byte{seen[0], clear}, updates, pk, frac, r.Packing) == "" {
		t.Error("an update in the clear (fixed point) was not found")
	}
	w, _ := r.Packing.LaneBits(frac)
	u := updates[2]
	m := new(big.Int)
	first := slices.IndexFunc(u, func(x float64) bool { return x != 0 }) / r.Packing.Lanes
	for l := r.Packing.Lanes - 1; l >= 0; l-- {
		m.Lsh(m, uint(w)).Add(m, big.NewInt(int64(math.Round(math.Ldexp(u[first*r.Packing.Lanes+l], frac)))))
	}
	if m.Sign() < 0 {
		m.Add(m, pk.N())
	}
	packed := append([]byte("header"), m.FillBytes(make([]byte, pk.CiphertextSize()))...)
	if findPlaintext([][]byte{packed}, updates, pk, frac, r.Packing) == "" {
		t.Error("a packed plaintext was not found")
	}
}

// TestCoordinatorResumesARoundAfterItsRestart: a coordinator that lost
// its memory mid-round gets the round's keys again (its certificate only),
// replays the ciphertexts it had stored, and the round decrypts; a
// finished round's keys are not handed out again.
func TestCoordinatorResumesARoundAfterItsRestart(t *testing.T) {
	h := newHarness(t, 3)
	ctx := context.Background()
	r, err := dphefed.StartRound(ctx, h.dial(t, "coordinator"), dphefed.RoundRequest{Round: 4, Coordinates: testCoords, Capacity: testCount,
		Clients: []string{"client-1", "client-2", "client-3"}, Pack: true, Bound: 4, MaxUsers: 8})
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string][][]byte{}
	want := make([]float64, testCoords)
	for i := 1; i <= 3; i++ {
		upd := testUpdate(i, r.Packing.Lanes)
		for j, x := range upd {
			want[j] += x
		}
		c, err := dphefed.Contribute(ctx, h.dial(t, clientName(i)), 4, upd, dphefed.ContributeOptions{Privacy: clientPrivacy(t, testCount, byte(i))})
		if err != nil {
			t.Fatal(err)
		}
		stored[clientName(i)] = c.Messages
	}
	_, err = dphefed.ResumeRound(ctx, h.dial(t, "client-1"), 4)
	wantCode(t, "a client asking for the aggregator's keys", err, codes.PermissionDenied)
	coord := h.dial(t, "coordinator") // the restarted coordinator's connection
	again, err := dphefed.ResumeRound(ctx, coord, 4)
	if err != nil {
		t.Fatal(err)
	}
	for name, msgs := range stored {
		for _, m := range msgs {
			if err := again.Receive(name, m); err != nil {
				t.Fatalf("%s's stored message after the restart: %v", name, err)
			}
		}
	}
	sum, err := again.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for j := range want {
		if math.Abs(sum.Sum[j]-want[j]) > 1e-6 {
			t.Fatalf("coordinate %d: %v, want %v", j, sum.Sum[j], want[j])
		}
	}
	_, err = dphefed.ResumeRound(ctx, coord, 4)
	wantCode(t, "the keys of a decrypted round", err, codes.FailedPrecondition)
}
