package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/face/nets"
	"github.com/veil-privacy/veil/internal/engine"
)

const benchFacesLong = `Bench faces measures the face pipeline (decode, detect, landmarks, align,
descriptor) on photos scaled so their longer side is --size pixels (default
1920; 0 keeps them as they are). Without arguments it uses face-api's six demo
photos.

"ms" is the mean time per photo of each stage when photos are processed one at
a time (a photo's faces still run on all cores); "ms_per_face" divides the
per-face stages by the faces found. Throughput ("photos_per_s", "faces_per_s")
runs one photo per core at once. "descriptors_per_s" runs the descriptor
network alone on 150×150 crops using every core. "vs_faceapi_wasm" gives the
ratios against face-api 1.7.15 on TF.js wasm measured on this machine kind
(30 ms per descriptor, 774 ms per 1920-pixel photo): above 1 is faster.`

func newBenchFacesCmd(e *env) *cobra.Command {
	var pf pipelineFlags
	var size, rounds int
	cmd := &cobra.Command{
		Use:   "faces [IMAGE...]",
		Short: "Milliseconds per pipeline stage, and photos, faces and descriptors per second on all cores",
		Long:  benchFacesLong,
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
			photos, err := face.BenchPhotos(paths, size)
			if err != nil {
				return err
			}
			o := face.BenchOptions{Pipeline: p, Photos: photos, PhotoPixels: size, Rounds: rounds, Workers: engine.Parallelism()}
			if !pf.quiet {
				o.Progress = e.stderr
			}
			b, err := face.NewBench(o)
			if err != nil {
				return err
			}
			rep, err := b.Run()
			if err != nil {
				return err
			}
			if pf.json {
				return writeJSON(e.stdout, rep)
			}
			printBenchFaces(e, rep)
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

func printBenchFaces(e *env, rep *face.BenchReport) {
	w := e.stdout
	fmt.Fprintf(w, "%d photos (long side %d px), %.2f faces each, %d workers, detector %s\n", rep.Photos, rep.PhotoPixels, rep.FacesPerPhoto, rep.Workers, rep.Detector)
	fmt.Fprintf(w, "per photo (ms): decode %.1f  detect %.1f  landmarks %.1f  align %.1f  descriptor %.1f\n",
		rep.MS["decode"], rep.MS["detect"], rep.MS["landmarks"], rep.MS["align"], rep.MS["descriptor"])
	fmt.Fprintf(w, "per face (ms): landmarks %.1f  align %.1f  descriptor %.1f\n", rep.MSPerFace["landmarks"], rep.MSPerFace["align"], rep.MSPerFace["descriptor"])
	fmt.Fprintf(w, "throughput: %.2f photos/s (%.0f ms per photo), %.1f faces/s, %.1f descriptors/s\n", rep.PhotosPerS, rep.PhotoMSWall, rep.FacesPerS, rep.DescriptorsPerS)
	fmt.Fprintf(w, "vs face-api wasm: descriptors %.2fx, photos %.2fx, detection %.2fx\n", rep.VsFaceAPI["descriptor_throughput"], rep.VsFaceAPI["photo_throughput"], rep.VsFaceAPI["detect_latency"])
}
