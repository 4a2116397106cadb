package tagging

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"testing"
)

// BenchmarkIntegrityCost measures what the integrity checks (issue 19
// item 7.2) cost on opening a library and computing its suggestions, in
// the same run as the same work without them ("unchecked": Open without
// verifying, reads without the per-row checks, as before the checks).
// The library has 2000 faces (descriptors, landmarks and 2 KB
// thumbnails, as indexing stores them) in 100 photos, 200 of them named
// after 20 people, and 50 rejections. Open uses the cheap test KDF, so the
// figures are the database work, not Argon2id (about 0.6 s of wall time
// at the default costs, which the checks do not change).
//
//	go test -run '^$' -bench IntegrityCost -benchtime 20x ./tagging
func BenchmarkIntegrityCost(b *testing.B) {
	dir := b.TempDir()
	l, err := Create(dir, []byte(testPass), cheapKDF)
	if err != nil {
		b.Fatal(err)
	}
	thumb := make([]byte, 2000)
	rand.Read(thumb)
	var named, all []int64
	for p := range 100 {
		faces := make([]NewFace, 20)
		for i := range faces {
			faces[i] = NewFace{Box: Box{X: float64(10 * i), Y: 1, Width: 50, Height: 50}, Score: 0.9, Source: Detected,
				Landmarks: testLandmarks(p*20 + i), Descriptor: testDescriptor(p*20 + i), Thumbnail: thumb}
		}
		path := fmt.Sprintf("/photos/%03d.jpg", p)
		_, ids, err := l.AddPhoto(PhotoRecord{Path: path, SHA256: sha256.Sum256([]byte(path)), Size: 1, Width: 640, Height: 480}, faces)
		if err != nil {
			b.Fatal(err)
		}
		named = append(named, ids[:2]...)
		all = append(all, ids...)
	}
	for i := 0; i < len(named); i += 10 {
		if _, err := l.NameFaces(named[i:i+10], fmt.Sprintf("Person %d", i/10)); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 50 {
		if err := l.RejectFace(all[2+40*i], "Person 0"); err != nil {
			b.Fatal(err)
		}
	}
	l.Close()
	// The two variants alternate within each iteration, so that the load
	// of a shared machine falls on both alike; each reports processor
	// time per operation (cpu-ms/op), which the load stretches less than
	// wall time, and the ratio of the checked to the unchecked.
	for _, suggest := range []bool{false, true} {
		name := map[bool]string{false: "open", true: "open+suggest"}[suggest]
		b.Run(name, func(b *testing.B) {
			var cpu [2]float64
			for b.Loop() {
				for v, check := range []bool{false, true} {
					c0 := processCPU()
					l, err := openChecked(b.Context(), dir, []byte(testPass), deriveKEK, check)
					if err != nil {
						b.Fatal(err)
					}
					if suggest {
						if _, err := l.Suggestions(DefaultSuggestOptions()); err != nil {
							b.Fatal(err)
						}
					}
					l.Close()
					cpu[v] += (processCPU() - c0).Seconds()
				}
			}
			n := float64(b.N)
			b.ReportMetric(1e3*cpu[0]/n, "unchecked-cpu-ms/op")
			b.ReportMetric(1e3*cpu[1]/n, "checked-cpu-ms/op")
			b.ReportMetric(cpu[1]/cpu[0], "checked/unchecked")
		})
	}
}

// FuzzIntegrityState: the decoders of the sealed integrity state and of
// the rotation's progress refuse anything malformed without panicking,
// and what they accept encodes back to the same bytes. (Both are only
// read after their seal authenticated them; the fuzz guards the parser.)
func FuzzIntegrityState(f *testing.F) {
	var st integrityState
	st.add(1, make([]byte, 32))
	st.useMetric = 2
	f.Add(st.encode())
	r := rotationState{table: 2, row: 7, oldDone: st, newDone: st}
	f.Add(r.encode())
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		if s, err := decodeIntegrityState(b); err == nil {
			if got := s.encode(); string(got) != string(b) {
				t.Errorf("integrity state %x re-encodes as %x", b, got)
			}
		}
		if r, err := decodeRotationState(b); err == nil {
			if got := r.encode(); string(got) != string(b) {
				t.Errorf("rotation state %x re-encodes as %x", b, got)
			}
		}
	})
}

// BenchmarkRotateKey measures RotateKey (veil library rekey) on a library
// of 2000 faces with 2 KB thumbnails in 100 photos (2100 rows), with the
// cheap test KDF, so the figure is the re-encryption, not Argon2id: wall
// and processor time per rotation.
//
//	go test -run '^$' -bench RotateKey -benchtime 5x ./tagging
func BenchmarkRotateKey(b *testing.B) {
	dir := b.TempDir()
	l, err := Create(dir, []byte(testPass), cheapKDF)
	if err != nil {
		b.Fatal(err)
	}
	thumb := make([]byte, 2000)
	rand.Read(thumb)
	for p := range 100 {
		faces := make([]NewFace, 20)
		for i := range faces {
			faces[i] = NewFace{Box: Box{X: float64(10 * i), Y: 1, Width: 50, Height: 50}, Score: 0.9, Source: Detected,
				Landmarks: testLandmarks(p*20 + i), Descriptor: testDescriptor(p*20 + i), Thumbnail: thumb}
		}
		path := fmt.Sprintf("/photos/%03d.jpg", p)
		if _, _, err := l.AddPhoto(PhotoRecord{Path: path, SHA256: sha256.Sum256([]byte(path)), Size: 1, Width: 640, Height: 480}, faces); err != nil {
			b.Fatal(err)
		}
	}
	l.Close()
	pass := []string{testPass, newTestPass}
	var cpu float64
	i := 0
	for b.Loop() {
		c0 := processCPU()
		if err := RotateKey(b.Context(), dir, []byte(pass[i%2]), newPass(pass[(i+1)%2]), cheapKDF, nil); err != nil {
			b.Fatal(err)
		}
		cpu += (processCPU() - c0).Seconds()
		i++
	}
	b.ReportMetric(1e3*cpu/float64(b.N), "cpu-ms/op")
}
