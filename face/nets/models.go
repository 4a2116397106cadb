// Package nets runs the pretrained face networks of @vladmandic/face-api
// (SSD-MobileNet-v1 and tiny face detectors, the 68-point landmark nets,
// age/gender, and dlib's ResNet face descriptor).
//
// Inference runs as Go kernels over contiguous NHWC memory: im2col,
// depthwise convolutions, pools and activations in Go (AVX2 through
// archsimd with GOEXPERIMENT=simd), and the convolutions' matrix products
// in one packed-filter product with an AVX2/FMA assembly block
// (kern_gemm.go). Only SSD's prediction layers on its small maps still run
// as a GoMLX execution. The descriptor, landmark and age/gender networks
// keep a whole-graph GoMLX build as a reference, and every network is
// tested against face-api's own outputs. On LFW's 250×250
// images this made a face's detection, landmarks and two descriptors about
// 2.8× cheaper in processor time than the GoMLX executions did.
//
// Weights are read from the npm package installed by scripts/install-models.sh
// and every file is checked against the sha256 list compiled into this
// package (models.sha256) before it is parsed.
package nets

import (
	"bufio"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/veil-privacy/veil/face/tfjs"
	"github.com/veil-privacy/veil/internal/digest"
)

//go:embed models.sha256
var modelSums string

// EnvModels names the environment variable that overrides the model folder.
const EnvModels = "VEIL_MODELS"

// packageModelDir is where scripts/install-models.sh puts the weight files,
// relative to the repository root.
const packageModelDir = "models/node_modules/@vladmandic/face-api/model"

// InstallHint tells a user how to install the models.
const InstallHint = "install them with scripts/install-models.sh (from the repository root), or point --models / " + EnvModels + " at face-api's model folder"

// ErrModelMissing is wrapped when a model file is not installed.
var ErrModelMissing = errors.New("pretrained model files not installed")

// ErrModelChecksum is wrapped when a model file does not match its pinned hash.
var ErrModelChecksum = errors.New("model file does not match its pinned sha256")

// DefaultModelDir returns the model folder: $VEIL_MODELS if set, else the
// package's model folder found by walking up from the working directory and
// from the executable's directory. If none is found it returns the path
// relative to the working directory, so the error names where it looked.
func DefaultModelDir() string {
	if d := os.Getenv(EnvModels); d != "" {
		return d
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, s := range starts {
		for d := s; ; d = filepath.Dir(d) {
			cand := filepath.Join(d, packageModelDir)
			if st, err := os.Stat(cand); err == nil && st.IsDir() {
				return cand
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return packageModelDir
}

// DemoImages returns the paths of face-api's demo photos (sample1..6.jpg),
// which ship beside the model folder in the npm package.
func DemoImages(modelDir string) []string {
	var out []string
	for i := 1; i <= 6; i++ {
		out = append(out, filepath.Join(modelDir, "..", "demo", fmt.Sprintf("sample%d.jpg", i)))
	}
	return out
}

// pinnedSums parses the embedded sha256 list ("HEX  NAME" per line).
func pinnedSums() (map[string]string, error) {
	sums := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(modelSums))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 || len(f[0]) != 64 {
			return nil, fmt.Errorf("nets: malformed line in models.sha256: %q", sc.Text())
		}
		sums[f[1]] = f[0]
	}
	return sums, sc.Err()
}

// VerifyFile checks the file against its pinned sha256.
func VerifyFile(dir, name string) error {
	sums, err := pinnedSums()
	if err != nil {
		return err
	}
	want, ok := sums[name]
	if !ok {
		return fmt.Errorf("model file %s has no pinned sha256; refusing to load it", name)
	}
	path := filepath.Join(dir, name)
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %s is missing; %s", ErrModelMissing, path, InstallHint)
		}
		return fmt.Errorf("opening model file: %w", err)
	}
	defer f.Close()
	h := digest.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("reading model file %s: %w", path, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%w: %s has sha256 %s, want %s; reinstall with scripts/install-models.sh",
			ErrModelChecksum, path, got, want)
	}
	return nil
}

// LoadWeights verifies a model's manifest and shard against the pinned
// hashes and then parses them. model is the file stem, for example
// "face_recognition_model".
func LoadWeights(dir, model string) (*tfjs.Weights, error) {
	manifest := model + "-weights_manifest.json"
	for _, name := range []string{manifest, model + ".bin"} {
		if err := VerifyFile(dir, name); err != nil {
			return nil, err
		}
	}
	w, err := tfjs.Load(filepath.Join(dir, manifest))
	if err != nil {
		return nil, fmt.Errorf("nets: loading %s: %w", model, err)
	}
	return w, nil
}

// PinnedDigest identifies the pinned model files: the sha256 of the
// embedded checksum list. Caches key on it so new weights invalidate them.
func PinnedDigest() string {
	s := sha256.Sum256([]byte(modelSums))
	return hex.EncodeToString(s[:])
}
