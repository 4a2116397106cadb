package coord_test

import (
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/wire"
)

// TestAsyncExchangesOfAHeadSizedModel runs eight exchanges of one client
// over gRPC and mutual TLS on loopback with a model of the embedding
// head's size (557,824 values), under EASGD (a model version stored per
// exchange) and FedBuff with K = 4 (the buffer stored and the log emptied
// per exchange), checks the model each ends with, and logs the time an
// exchange took (poll, download, send, fold, commit).
func TestAsyncExchangesOfAHeadSizedModel(t *testing.T) {
	const n, exchanges = 557824, 8
	for _, c := range []struct {
		a    coord.AsyncOptions
		want float64 // each value of the final model
	}{
		// Each exchange is on the current centre: x̃ += β·Δ.
		{coord.AsyncOptions{Strategy: coord.AsyncEASGD, Beta: 0.5, Period: 1, MaxStaleness: 4}, exchanges * 0.5e-3},
		// Two buffers of four Δ, each moving the model by their mean.
		{coord.AsyncOptions{Strategy: coord.AsyncFedBuff, BufferSize: 4, MaxStaleness: 4}, 2e-3},
	} {
		t.Run(c.a.Strategy, func(t *testing.T) {
			o := asyncOptions(t, c.a, 100)
			o.Init = wire.Weights{{Name: "w", Shape: []int{n / 2, 2}, Values: make([]float32, n)}}
			o.MaxUpdateNorm = 1e9
			h := startHarness(t, o, filepath.Join(t.TempDir(), "pki"))
			rc := h.raw(t, "client-1")
			start := time.Now()
			for range exchanges {
				task, m := rc.pull()
				if r := rc.push(task, constant(m, 1e-3)); !r.GetAccepted() {
					t.Fatal(r.GetReason())
				}
			}
			per := time.Since(start) / exchanges
			w, _ := h.co.Model()
			for i, v := range w[0].Values {
				if math.Abs(float64(v)-c.want) > 1e-6 {
					t.Fatalf("value %d is %g, want %g", i, v, c.want)
				}
			}
			t.Logf("%s: %s per exchange of %d values (%d exchanges)", c.a.Strategy, per.Round(time.Millisecond), n, exchanges)
		})
	}
}
