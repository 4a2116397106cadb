package masking

import (
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/veil-privacy/veil/internal/cputime"
)

// BenchmarkClientRound times one client's whole round (key generation and
// advertisement, sharing, masking, unmasking answer) for a vector of
// 557,824 values (the size of Veil's trainable head), and reports the
// bytes it sends against the 4 bytes per value of a plaintext update.
// The other clients' steps run with the timer stopped.
//
//	go test -run XXX -bench ClientRound -benchtime 3x ./secagg/masking/
func BenchmarkClientRound(b *testing.B) {
	const length = 557824
	for _, tc := range []struct{ n, k, t int }{{8, 7, 5}, {100, 14, 8}} {
		b.Run(fmt.Sprintf("n=%d,k=%d", tc.n, tc.k), func(b *testing.B) {
			f := newFixture(b, tc.n, tc.k, tc.t, length, 1)
			r := testRand(2)
			input := make([]uint32, length)
			for i := range input {
				input[i] = uint32(i)
			}
			var sent int
			var cpu time.Duration
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.StopTimer()
			for range b.N {
				sent = benchOneRound(b, f, r, input, &cpu)
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(sent), "bytes_sent")
			b.ReportMetric(float64(sent)/float64(4*length), "x_plaintext")
		})
	}
}

// benchOneRound plays a round, timing client 0 only, and returns the
// bytes client 0 sent.
func benchOneRound(b *testing.B, f *fixture, r io.Reader, input []uint32, cpu *time.Duration) int {
	var c0 time.Duration
	start := func() { b.StartTimer(); c0 = cputime.Thread() }
	stop := func() { *cpu += cputime.Thread() - c0; b.StopTimer() }
	srv, err := NewServer(f.p, f.keys)
	if err != nil {
		b.Fatal(err)
	}
	me := f.p.Roster[0]
	clients := map[uint32]*Client{}
	sent := 0
	size := func(m interface{ MarshalBinary() ([]byte, error) }) {
		enc, err := m.MarshalBinary()
		if err != nil {
			b.Fatal(err)
		}
		sent += len(enc)
	}
	for _, id := range f.p.Roster {
		if id == me {
			start()
		}
		c, ad, err := NewClient(f.config(id), f.p, r)
		if id == me {
			stop()
			size(ad)
		}
		if err != nil {
			b.Fatal(err)
		}
		clients[id] = c
		if err := srv.ReceiveAdvert(ad); err != nil {
			b.Fatal(err)
		}
	}
	for _, id := range f.p.Roster {
		ads, err := srv.AdvertsFor(id)
		if err != nil {
			b.Fatal(err)
		}
		if id == me {
			start()
		}
		sh, err := clients[id].ShareKeys(ads, r)
		if id == me {
			stop()
			enc, _ := EncodeShares(f.p.RoundID, sh)
			sent += len(enc)
		}
		if err != nil {
			b.Fatal(err)
		}
		if err := srv.ReceiveShares(id, sh); err != nil {
			b.Fatal(err)
		}
	}
	// Only client 0 masks its input: the other clients' masked inputs do
	// not change client 0's work, and the request names every client a
	// survivor (the largest answer).
	sh, err := srv.SharesFor(me)
	if err != nil {
		b.Fatal(err)
	}
	start()
	m, err := clients[me].MaskInput(sh, input)
	stop()
	if err != nil {
		b.Fatal(err)
	}
	size(m)
	req := &UnmaskRequest{RoundID: f.p.RoundID, Survivors: f.p.Roster}
	start()
	resp, err := clients[me].Unmask(req)
	stop()
	if err != nil {
		b.Fatal(err)
	}
	size(resp)
	return sent
}

// BenchmarkServerUnmask times the coordinator's Sum (seed and key
// reconstruction, mask expansion, summation) for 557,824 values, with
// one client in ten dropped after sharing keys.
//
//	go test -run XXX -bench ServerUnmask -benchtime 1x ./secagg/masking/
func BenchmarkServerUnmask(b *testing.B) {
	const length = 557824
	for _, tc := range []struct{ n, k, t int }{{8, 7, 5}, {100, 14, 8}} {
		b.Run(fmt.Sprintf("n=%d,k=%d", tc.n, tc.k), func(b *testing.B) {
			f := newFixture(b, tc.n, tc.k, tc.t, length, 1)
			r := testRand(3)
			stages := map[uint32]stage{}
			for i, id := range f.p.Roster {
				stages[id] = complete
				if i%10 == 9 {
					stages[id] = dropAfterShares
				}
			}
			var cpu time.Duration
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.StopTimer()
			for range b.N {
				benchServer(b, f, stages, r, &cpu)
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

func benchServer(b *testing.B, f *fixture, stages map[uint32]stage, r io.Reader, cpu *time.Duration) {
	srv, _ := NewServer(f.p, f.keys)
	clients := map[uint32]*Client{}
	for _, id := range f.p.Roster {
		c, ad, _ := NewClient(f.config(id), f.p, r)
		clients[id] = c
		srv.ReceiveAdvert(ad)
	}
	for _, id := range f.p.Roster {
		ads, _ := srv.AdvertsFor(id)
		sh, _ := clients[id].ShareKeys(ads, r)
		srv.ReceiveShares(id, sh)
	}
	in := make([]uint32, f.p.Length)
	for _, id := range f.p.Roster {
		if stages[id] < dropAfterInput {
			continue
		}
		sh, _ := srv.SharesFor(id)
		m, _ := clients[id].MaskInput(sh, in)
		srv.ReceiveMasked(m)
	}
	req, _ := srv.UnmaskRequest()
	for _, id := range req.Survivors {
		resp, _ := clients[id].Unmask(req)
		srv.ReceiveUnmask(resp)
	}
	b.StartTimer()
	c0 := cputime.Thread()
	res, err := srv.Sum()
	*cpu += cputime.Thread() - c0
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range res.Sum {
		if v != 0 {
			b.Fatal("wrong sum")
		}
	}
}
