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
	sr, dr, err := serveAndDrive(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	return sr, dr
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
		// Each round's time is split in order: its start, the last task
		// pushed, the last model held, the submissions' start, the last
		// update received, the close committed; the coordinator's parts
		// are positive.
		if len(sr.Timings) != 2 || len(dr.Phases) != 2 {
			t.Fatalf("tls %v: %d rounds timed by the coordinator and %d by the clients, want 2 and 2", tls, len(sr.Timings), len(dr.Phases))
		}
		for i, tm := range sr.Timings {
			p := dr.Phases[i]
			if !(tm.StartedNs <= p.LastTaskNs && p.LastTaskNs <= p.LastModelNs && p.LastModelNs <= p.ReleaseNs &&
				p.ReleaseNs <= tm.LastArrivalNs && tm.LastArrivalNs <= tm.ClosedNs) {
				t.Errorf("tls %v, round %d: instants out of order: %+v %+v", tls, i+1, tm, p)
			}
			if !(tm.FoldS > 0 && tm.CommitS > 0 && tm.CloseS > 0) {
				t.Errorf("tls %v, round %d: fold, commit and close %g, %g, %g s", tls, i+1, tm.FoldS, tm.CommitS, tm.CloseS)
			}
		}
		// Everything that crossed the socket: at least the payload, and
		// not absurdly more (framing, headers, TLS records).
		if dr.BytesPerUpdate < 4000 || dr.BytesPerUpdate > 4000+8000 {
			t.Errorf("tls %v: %g bytes per update on the wire for a 4,000-byte payload", tls, dr.BytesPerUpdate)
		}
	}
}

func TestSplitOf(t *testing.T) {
	const s = int64(1e9)
	sr := &ServeReport{Timings: []ServeTiming{
		{StartedNs: 10 * s, LastArrivalNs: 14 * s, ClosedNs: 15 * s, FoldS: 0.5, CommitS: 0.25, CloseS: 0.25},
		{StartedNs: 20 * s, LastArrivalNs: 26 * s, ClosedNs: 28 * s, FoldS: 1.5, CommitS: 0.75, CloseS: 0.75},
	}}
	dr := &DriveReport{Phases: []DrivePhases{
		{LastTaskNs: 11 * s, LastModelNs: 12 * s, ReleaseNs: 12 * s},
		{LastTaskNs: 23 * s, LastModelNs: 24 * s, ReleaseNs: 24 * s},
	}}
	got := SplitOf(sr, dr)
	want := Split{WaitS: 2, DownloadS: 1, UploadS: 2, FoldS: 1, CommitS: 0.5, CloseS: 0.5, LastUpdateToCloseS: 1.5}
	if got != want {
		t.Fatalf("SplitOf = %+v, want %+v", got, want)
	}
	if got := SplitOf(&ServeReport{}, dr); got != (Split{}) {
		t.Fatalf("SplitOf without the coordinator's timings = %+v", got)
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
