package fedbench

import (
	"context"
	"testing"
	"time"
)

// run serves and drives s in this process.
func run(t testing.TB, s Settings) (*ServeReport, *DriveReport) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	addr := make(chan string, 1)
	type served struct {
		r   *ServeReport
		err error
	}
	done := make(chan served, 1)
	go func() {
		r, err := Serve(ctx, s, "127.0.0.1:0", func(a string) { addr <- a })
		done <- served{r, err}
	}()
	var a string
	select {
	case a = <-addr:
	case sv := <-done:
		t.Fatalf("the coordinator stopped: %v", sv.err)
	}
	dr, err := Drive(ctx, s, a)
	if err != nil {
		t.Fatal(err)
	}
	sv := <-done
	if sv.err != nil {
		t.Fatal(sv.err)
	}
	return sv.r, dr
}

func TestBenchRounds(t *testing.T) {
	dir := t.TempDir()
	if err := Prepare(dir, 3); err != nil {
		t.Fatal(err)
	}
	for _, tls := range []bool{false, true} {
		s := Settings{Clients: 3, Params: 1000, Rounds: 2, TLS: tls, Dir: dir}
		sr, dr := run(t, s)
		if sr.Accepted != 6 || sr.Refused != 0 || len(sr.RoundSeconds) != 2 || sr.BytesAccepted != 6*4000 {
			t.Errorf("tls %v: coordinator saw %+v, want 6 accepted updates of 4,000 bytes in 2 rounds", tls, sr)
		}
		if dr.Updates != 6 || len(dr.SubmitSeconds) != 2 || !(dr.UpdatesPerSecond > 0) || dr.PayloadBytes != 4000 {
			t.Errorf("tls %v: clients measured %+v", tls, dr)
		}
		// Everything that crossed the socket: at least the payload, and
		// not absurdly more (framing, headers, TLS records).
		if dr.BytesPerUpdate < 4000 || dr.BytesPerUpdate > 4000+8000 {
			t.Errorf("tls %v: %g bytes per update on the wire for a 4,000-byte payload", tls, dr.BytesPerUpdate)
		}
	}
}

func TestLayoutIsTheHead(t *testing.T) {
	w, err := Layout(HeadParams)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"fc1/w", "fc1/b", "act1/alpha", "fc2/w", "fc2/b", "head/centre"}
	if w.Len() != HeadParams || len(w) != len(want) {
		t.Fatalf("layout of %d values in %d tensors, want %d in %d", w.Len(), len(w), HeadParams, len(want))
	}
	for i, n := range want {
		if w[i].Name != n {
			t.Errorf("tensor %d is %q, want %q", i, w[i].Name, n)
		}
	}
	if _, err := Layout(0); err == nil {
		t.Error("a model of 0 values was accepted")
	}
}

// BenchmarkFold measures the coordinator's accepted updates per second
// of the head's size from 20 clients, without TLS.
func BenchmarkFold(b *testing.B) {
	dir := b.TempDir()
	if err := Prepare(dir, 100); err != nil {
		b.Fatal(err)
	}
	s := Settings{Clients: 100, Params: HeadParams, Rounds: max(1, b.N), Dir: dir}
	_, dr := run(b, s)
	b.ReportMetric(dr.UpdatesPerSecond, "updates/s")
}
