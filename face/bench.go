package face

import (
	"bytes"
	"errors"
	"fmt"
	"image/jpeg"
	"io"
	"sync"
	"time"

	"github.com/veil-privacy/veil/face/nets"
	"github.com/veil-privacy/veil/imaging"
)

// Peer figures of the pipeline benchmark: face-api 1.7.15 on TF.js's wasm
// backend (SIMD, one thread), measured on this machine kind (see the
// face-pipeline issue).
const (
	PeerDescriptorMs = 30.0  // per descriptor on a 150×150 crop
	PeerPhotoMs      = 774.0 // SSD + 68 landmarks + descriptors, 1920-pixel photo
	PeerDetectMs     = 388.0 // of which SSD detection
)

// BenchReport is the pipeline benchmark's report (veil bench faces).
type BenchReport struct {
	Photos          int                `json:"photos"`
	PhotoPixels     int                `json:"photo_long_side"`
	FacesPerPhoto   float64            `json:"faces_per_photo"`
	Workers         int                `json:"workers"`
	Detector        string             `json:"detector"`
	PhotosPerS      float64            `json:"photos_per_s"`
	FacesPerS       float64            `json:"faces_per_s"`
	DescriptorsPerS float64            `json:"descriptors_per_s"`
	MS              map[string]float64 `json:"ms"`
	MSPerFace       map[string]float64 `json:"ms_per_face"`
	PhotoMSWall     float64            `json:"photo_ms_throughput"`
	VsFaceAPI       map[string]float64 `json:"vs_faceapi_wasm"`
	Note            string             `json:"note"`
}

// BenchOptions configure a Bench.
type BenchOptions struct {
	// Pipeline is the pipeline measured; it must compute descriptors.
	Pipeline *Pipeline
	// Photos are the encoded photos (BenchPhotos makes them).
	Photos [][]byte
	// PhotoPixels is the photos' longer side, for the report (0: as they
	// were).
	PhotoPixels int
	// Rounds is the number of passes over the photos per measurement (at
	// least 1).
	Rounds int
	// Workers is the number of photos run at once in the throughput
	// measurement (at least 1).
	Workers int
	// Progress receives a line when the warm-up starts; nil: none.
	Progress io.Writer
}

// Bench measures a pipeline's stages, its throughput on every worker and
// the descriptor network alone.
type Bench struct {
	o BenchOptions
}

// NewBench checks o.
func NewBench(o BenchOptions) (*Bench, error) {
	switch {
	case o.Pipeline == nil:
		return nil, errors.New("face bench: no pipeline")
	case !o.Pipeline.Options().Descriptors:
		return nil, errors.New("face bench: the pipeline does not compute descriptors")
	case len(o.Photos) == 0:
		return nil, errors.New("face bench: no photos")
	case o.Rounds < 1 || o.Workers < 1:
		return nil, fmt.Errorf("face bench: rounds (%d) and workers (%d) must be at least 1", o.Rounds, o.Workers)
	case o.PhotoPixels < 0:
		return nil, fmt.Errorf("face bench: photo size %d is negative", o.PhotoPixels)
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return &Bench{o: o}, nil
}

// BenchPhotos loads the photos, scales them so that their longer side
// has size pixels (0: as they are) and re-encodes them as JPEG, so that
// decoding is part of what is measured.
func BenchPhotos(paths []string, size int) ([][]byte, error) {
	var out [][]byte
	for _, p := range paths {
		img, _, err := imaging.DecodeFile(p, imaging.DefaultLimits())
		if err != nil {
			return nil, err
		}
		if size > 0 {
			scale := float64(size) / float64(max(img.W, img.H))
			w, h := max(1, int(float64(img.W)*scale+0.5)), max(1, int(float64(img.H)*scale+0.5))
			img = floatToRGB(imaging.ResizeBilinear(img.ToFloat(), w, h))
		}
		var buf bytes.Buffer
		if err := jpeg.Encode(&buf, img.Image(), &jpeg.Options{Quality: 92}); err != nil {
			return nil, fmt.Errorf("bench: encoding %s: %w", p, err)
		}
		out = append(out, buf.Bytes())
	}
	return out, nil
}

// floatToRGB rounds and clamps a 3-channel float image to 8 bits.
func floatToRGB(f *imaging.Float) *imaging.RGB {
	m := imaging.NewRGB(f.W, f.H)
	for i, v := range f.Pix {
		m.Pix[i] = uint8(min(255, max(0, v+0.5)))
	}
	return m
}

// benchRun is one photo through the pipeline.
type benchRun struct {
	faces  []Face
	img    *imaging.RGB
	tm     Timings
	decode time.Duration
}

func (b *Bench) run(data []byte) (benchRun, error) {
	t0 := time.Now()
	img, _, err := imaging.Decode(data, imaging.DefaultLimits())
	if err != nil {
		return benchRun{}, err
	}
	dec := time.Since(t0)
	faces, tm, err := b.o.Pipeline.Run(img)
	return benchRun{faces: faces, img: img, tm: tm, decode: dec}, err
}

// Run measures: a warm-up (which compiles and collects the aligned crops),
// the stages one photo at a time, the throughput with one photo per
// worker at once, and the descriptor network alone.
func (b *Bench) Run() (*BenchReport, error) {
	fmt.Fprintln(b.o.Progress, "bench: warming up (compiling graphs)...")
	crops, err := b.warmUp()
	if err != nil {
		return nil, err
	}
	rep, err := b.latency()
	if err != nil {
		return nil, err
	}
	if err := b.throughput(rep); err != nil {
		return nil, err
	}
	if rep.DescriptorsPerS, err = b.descriptors(crops); err != nil {
		return nil, err
	}
	rep.VsFaceAPI = map[string]float64{
		"descriptor_throughput": rep.DescriptorsPerS / (1000 / PeerDescriptorMs),
		"photo_throughput":      PeerPhotoMs / rep.PhotoMSWall,
		"detect_latency":        PeerDetectMs / rep.MS["detect"],
	}
	rep.Note = "ms: mean per photo, one photo at a time; throughput: one photo per core at once; peer: face-api 1.7.15 on TF.js wasm (SIMD, 1 thread) on this machine kind: 30 ms/descriptor, 774 ms per 1920-px photo, 388 ms of it detection"
	return rep, nil
}

// warmUp runs every photo once (compiling every graph) and returns the
// aligned crops of their faces for the descriptor-only measurement.
func (b *Bench) warmUp() ([]*imaging.Float, error) {
	var crops []*imaging.Float
	for _, ph := range b.o.Photos {
		r, err := b.run(ph)
		if err != nil {
			return nil, err
		}
		for i := range r.faces {
			chip, err := DlibChip(r.img, &r.faces[i].Landmarks, 150)
			if err != nil {
				return nil, err
			}
			crops = append(crops, nets.DescriptorInput(chip))
		}
	}
	if len(crops) == 0 {
		return nil, fmt.Errorf("bench: no face found in the photos")
	}
	return crops, nil
}

// latency runs one photo at a time and reports the stages' mean times.
func (b *Bench) latency() (*BenchReport, error) {
	var tm Timings
	var dec time.Duration
	nFaces := 0
	for r := 0; r < b.o.Rounds; r++ {
		for _, ph := range b.o.Photos {
			run, err := b.run(ph)
			if err != nil {
				return nil, err
			}
			tm.Add(run.tm)
			dec += run.decode
			nFaces += len(run.faces)
		}
	}
	nPhotos := float64(b.o.Rounds * len(b.o.Photos))
	ms := func(d time.Duration, n float64) float64 { return float64(d) / float64(time.Millisecond) / n }
	return &BenchReport{
		Photos: len(b.o.Photos), PhotoPixels: b.o.PhotoPixels, FacesPerPhoto: float64(nFaces) / nPhotos, Workers: b.o.Workers,
		Detector: string(b.o.Pipeline.Options().Detector),
		MS: map[string]float64{
			"decode": ms(dec, nPhotos), "detect": ms(tm.Detect, nPhotos), "landmarks": ms(tm.Landmarks, nPhotos),
			"align": ms(tm.Align, nPhotos), "descriptor": ms(tm.Descriptor, nPhotos),
		},
		MSPerFace: map[string]float64{
			"landmarks": ms(tm.Landmarks, float64(nFaces)), "align": ms(tm.Align, float64(nFaces)),
			"descriptor": ms(tm.Descriptor, float64(nFaces)),
		},
	}, nil
}

// throughput runs one photo per worker at once.
func (b *Bench) throughput(rep *BenchReport) error {
	work := make(chan []byte)
	var mu sync.Mutex
	var firstErr error
	faces := 0
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < b.o.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ph := range work {
				r, err := b.run(ph)
				mu.Lock()
				faces += len(r.faces)
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	for r := 0; r < b.o.Rounds; r++ {
		for _, ph := range b.o.Photos {
			work <- ph
		}
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	wall := time.Since(start).Seconds()
	rep.PhotosPerS = float64(b.o.Rounds*len(b.o.Photos)) / wall
	rep.FacesPerS = float64(faces) / wall
	rep.PhotoMSWall = 1000 / rep.PhotosPerS
	return nil
}

// descriptors runs the descriptor network alone on batches of at least
// 32 crops, on every core, and returns descriptors per second.
func (b *Bench) descriptors(crops []*imaging.Float) (float64, error) {
	desc, err := nets.NewDescriptor(b.o.Pipeline.Options().ModelDir, b.o.Pipeline.Options().Engine)
	if err != nil {
		return 0, err
	}
	batch := crops
	for len(batch) < 32 {
		batch = append(batch, crops...)
	}
	if _, err := desc.Compute(batch); err != nil { // compile
		return 0, err
	}
	t0 := time.Now()
	for r := 0; r < b.o.Rounds; r++ {
		if _, err := desc.Compute(batch); err != nil {
			return 0, err
		}
	}
	return float64(b.o.Rounds*len(batch)) / time.Since(t0).Seconds(), nil
}
