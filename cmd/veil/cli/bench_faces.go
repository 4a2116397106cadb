package cli

import (
	"bytes"
	"fmt"
	"image/jpeg"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/face/nets"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/engine"
)

// Peer figures: face-api 1.7.15 on TF.js's wasm backend (SIMD, one thread),
// measured on this machine kind (see the face-pipeline issue).
const (
	peerDescriptorMs = 30.0  // per descriptor on a 150×150 crop
	peerPhotoMs      = 774.0 // SSD + 68 landmarks + descriptors, 1920-pixel photo
	peerDetectMs     = 388.0 // of which SSD detection
)

type benchFacesReport struct {
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

func newBenchFacesCmd(e *env) *cobra.Command {
	var pf pipelineFlags
	var size, rounds int
	cmd := &cobra.Command{
		Use:   "faces [IMAGE...]",
		Short: "Milliseconds per pipeline stage, and photos, faces and descriptors per second on all cores",
		Long: `Bench faces measures the face pipeline (decode, detect, landmarks, align,
descriptor) on photos scaled so their longer side is --size pixels (default
1920; 0 keeps them as they are). Without arguments it uses face-api's six demo
photos.

"ms" is the mean time per photo of each stage when photos are processed one at
a time (a photo's faces still run on all cores); "ms_per_face" divides the
per-face stages by the faces found. Throughput ("photos_per_s", "faces_per_s")
runs one photo per core at once. "descriptors_per_s" runs the descriptor
network alone on 150×150 crops using every core. "vs_faceapi_wasm" gives the
ratios against face-api 1.7.15 on TF.js wasm measured on this machine kind
(30 ms per descriptor, 774 ms per 1920-pixel photo): above 1 is faster.`,
		Example: `  veil bench faces
  veil bench faces --size 0 --detector tiny --json photos/*.jpg`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFlags(atLeast("size", size, 0), atLeast("rounds", rounds, 1)); err != nil {
				return err
			}
			opt, err := pf.options()
			if err != nil {
				return err
			}
			opt.Descriptors = true
			p, err := e.pipeline(opt)
			if err != nil {
				return err
			}
			paths := args
			if len(paths) == 0 {
				paths = nets.DemoImages(p.Options().ModelDir)
			}
			photos, err := benchPhotos(paths, size)
			if err != nil {
				return err
			}
			rep, err := benchFaces(e, p, photos, rounds, pf.quiet)
			if err != nil {
				return err
			}
			rep.PhotoPixels, rep.Detector = size, string(p.Options().Detector)
			if pf.json {
				return writeJSON(e.stdout, rep)
			}
			w := e.stdout
			fmt.Fprintf(w, "%d photos (long side %d px), %.2f faces each, %d workers, detector %s\n", rep.Photos, size, rep.FacesPerPhoto, rep.Workers, rep.Detector)
			fmt.Fprintf(w, "per photo (ms): decode %.1f  detect %.1f  landmarks %.1f  align %.1f  descriptor %.1f\n",
				rep.MS["decode"], rep.MS["detect"], rep.MS["landmarks"], rep.MS["align"], rep.MS["descriptor"])
			fmt.Fprintf(w, "per face (ms): landmarks %.1f  align %.1f  descriptor %.1f\n", rep.MSPerFace["landmarks"], rep.MSPerFace["align"], rep.MSPerFace["descriptor"])
			fmt.Fprintf(w, "throughput: %.2f photos/s (%.0f ms per photo), %.1f faces/s, %.1f descriptors/s\n", rep.PhotosPerS, rep.PhotoMSWall, rep.FacesPerS, rep.DescriptorsPerS)
			fmt.Fprintf(w, "vs face-api wasm: descriptors %.2fx, photos %.2fx, detection %.2fx\n", rep.VsFaceAPI["descriptor_throughput"], rep.VsFaceAPI["photo_throughput"], rep.VsFaceAPI["detect_latency"])
			return nil
		},
	}
	pf.register(cmd, true, "ssd")
	// face-api describes each face once: compare like with like.
	cmd.Flags().Lookup("align").DefValue = string(face.AlignFaceAPI)
	pf.align = string(face.AlignFaceAPI)
	cmd.Flags().IntVar(&size, "size", 1920, "scale photos so the longer side has this many pixels (0: as they are)")
	cmd.Flags().IntVar(&rounds, "rounds", 2, "passes over the photos for each measurement")
	return cmd
}

// benchPhotos loads the photos, scales them and re-encodes them as JPEG so
// decoding is part of what is measured.
func benchPhotos(paths []string, size int) ([][]byte, error) {
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

func benchFaces(e *env, p *face.Pipeline, photos [][]byte, rounds int, quiet bool) (*benchFacesReport, error) {
	lim := imaging.DefaultLimits()
	run := func(data []byte) (int, face.Timings, time.Duration, []face.Face, *imaging.RGB, error) {
		t0 := time.Now()
		img, _, err := imaging.Decode(data, lim)
		if err != nil {
			return 0, face.Timings{}, 0, nil, nil, err
		}
		dec := time.Since(t0)
		faces, tm, err := p.Run(img)
		return len(faces), tm, dec, faces, img, err
	}
	if !quiet {
		fmt.Fprintln(e.stderr, "bench: warming up (compiling graphs)...")
	}
	// Warm-up compiles every graph and collects aligned crops for the
	// descriptor-only measurement.
	var crops []*imaging.Float
	for _, ph := range photos {
		_, _, _, faces, img, err := run(ph)
		if err != nil {
			return nil, err
		}
		for i := range faces {
			chip, err := face.DlibChip(img, &faces[i].Landmarks, 150)
			if err != nil {
				return nil, err
			}
			crops = append(crops, nets.DescriptorInput(chip))
		}
	}
	if len(crops) == 0 {
		return nil, fmt.Errorf("bench: no face found in the photos")
	}
	// Latency: one photo at a time.
	var tm face.Timings
	var dec time.Duration
	nFaces := 0
	for r := 0; r < rounds; r++ {
		for _, ph := range photos {
			n, t, d, _, _, err := run(ph)
			if err != nil {
				return nil, err
			}
			tm.Add(t)
			dec += d
			nFaces += n
		}
	}
	nPhotos := float64(rounds * len(photos))
	ms := func(d time.Duration, n float64) float64 { return float64(d) / float64(time.Millisecond) / n }
	rep := &benchFacesReport{
		Photos: len(photos), FacesPerPhoto: float64(nFaces) / nPhotos, Workers: engine.Parallelism(),
		MS: map[string]float64{
			"decode": ms(dec, nPhotos), "detect": ms(tm.Detect, nPhotos), "landmarks": ms(tm.Landmarks, nPhotos),
			"align": ms(tm.Align, nPhotos), "descriptor": ms(tm.Descriptor, nPhotos),
		},
		MSPerFace: map[string]float64{
			"landmarks": ms(tm.Landmarks, float64(nFaces)), "align": ms(tm.Align, float64(nFaces)),
			"descriptor": ms(tm.Descriptor, float64(nFaces)),
		},
	}
	// Throughput: one photo per worker at once.
	work := make(chan []byte)
	var mu sync.Mutex
	var firstErr error
	faces := 0
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < rep.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ph := range work {
				n, _, _, _, _, err := run(ph)
				mu.Lock()
				faces += n
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	for r := 0; r < rounds; r++ {
		for _, ph := range photos {
			work <- ph
		}
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	wall := time.Since(start).Seconds()
	rep.PhotosPerS = nPhotos / wall
	rep.FacesPerS = float64(faces) / wall
	rep.PhotoMSWall = 1000 / rep.PhotosPerS
	// Descriptor network alone, all cores.
	desc, err := nets.NewDescriptor(p.Options().ModelDir)
	if err != nil {
		return nil, err
	}
	batch := crops
	for len(batch) < 32 {
		batch = append(batch, crops...)
	}
	if _, err := desc.Compute(batch); err != nil { // compile
		return nil, err
	}
	t0 := time.Now()
	for r := 0; r < rounds; r++ {
		if _, err := desc.Compute(batch); err != nil {
			return nil, err
		}
	}
	rep.DescriptorsPerS = float64(rounds*len(batch)) / time.Since(t0).Seconds()
	rep.VsFaceAPI = map[string]float64{
		"descriptor_throughput": rep.DescriptorsPerS / (1000 / peerDescriptorMs),
		"photo_throughput":      peerPhotoMs / rep.PhotoMSWall,
		"detect_latency":        peerDetectMs / rep.MS["detect"],
	}
	rep.Note = "ms: mean per photo, one photo at a time; throughput: one photo per core at once; peer: face-api 1.7.15 on TF.js wasm (SIMD, 1 thread) on this machine kind: 30 ms/descriptor, 774 ms per 1920-px photo, 388 ms of it detection"
	return rep, nil
}

// floatToRGB rounds and clamps a 3-channel float image to 8 bits.
func floatToRGB(f *imaging.Float) *imaging.RGB {
	m := imaging.NewRGB(f.W, f.H)
	for i, v := range f.Pix {
		m.Pix[i] = uint8(min(255, max(0, v+0.5)))
	}
	return m
}
