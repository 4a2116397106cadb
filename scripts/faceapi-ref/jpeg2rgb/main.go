// Command jpeg2rgb decodes images exactly as Veil does (imaging.DecodeFile:
// Go's image/jpeg, EXIF orientation applied) and writes each as raw
// row-major RGB bytes, so face-api's reference run (scripts/faceapi-ref/
// detect.js) sees the very pixels Veil sees: two JPEG decoders differ by a
// level here and there, which would blur a comparison of the networks.
//
// Usage:
//
//	go run ./scripts/faceapi-ref/jpeg2rgb -root DIR -out OUTDIR NAME...
//
// Each NAME is a path relative to DIR; OUTDIR receives one .rgb file per
// image and manifest.json listing name, width, height, the file and the
// sha256 of its bytes.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/veil-privacy/veil/imaging"
)

type entry struct {
	Name   string `json:"name"`
	Width  int    `json:"width"`
	Height int    `json:"height"`
	RGB    string `json:"rgb"`
	SHA256 string `json:"rgb_sha256"`
}

func main() {
	root := flag.String("root", ".", "folder the image names are relative to")
	out := flag.String("out", "", "output folder (required)")
	flag.Parse()
	if *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: jpeg2rgb -root DIR -out OUTDIR NAME...")
		os.Exit(2)
	}
	if err := run(*root, *out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "jpeg2rgb:", err)
		os.Exit(1)
	}
}

func run(root, out string, names []string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var man []entry
	for _, name := range names {
		img, _, err := imaging.DecodeFile(filepath.Join(root, name), imaging.DefaultLimits())
		if err != nil {
			return err
		}
		file := strings.NewReplacer("/", "__", `\`, "__").Replace(name) + ".rgb"
		if err := os.WriteFile(filepath.Join(out, file), img.Pix, 0o644); err != nil {
			return err
		}
		sum := sha256.Sum256(img.Pix)
		man = append(man, entry{Name: name, Width: img.W, Height: img.H, RGB: file, SHA256: hex.EncodeToString(sum[:])})
	}
	b, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "manifest.json"), append(b, '\n'), 0o644)
}
