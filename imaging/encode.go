package imaging

import (
	"fmt"
	"image/jpeg"
	"io"
	"path/filepath"
	"strings"
)

// Format is an image file format Encode writes.
type Format string

// The formats Encode writes.
const (
	PNG  Format = "png"
	JPEG Format = "jpeg"
)

// JPEGQuality is the quality Encode writes JPEG at.
const JPEGQuality = 92

// FormatOf returns the format a file name's extension asks for: .png is
// PNG, .jpg and .jpeg JPEG (in any case). Any other extension, or none, is
// an error naming the file and the extensions known, so that a file is
// never written in a format its name does not say.
func FormatOf(name string) (Format, error) {
	switch ext := strings.ToLower(filepath.Ext(name)); ext {
	case ".png":
		return PNG, nil
	case ".jpg", ".jpeg":
		return JPEG, nil
	case "":
		return "", fmt.Errorf("%s: no extension to tell the image format: end the name in .png, .jpg or .jpeg", name)
	default:
		return "", fmt.Errorf("%s: cannot write %s images: end the name in .png, .jpg or .jpeg", name, ext)
	}
}

// Encode writes the image in format f: PNG (8-bit RGB) or JPEG at
// JPEGQuality.
func (m *RGB) Encode(w io.Writer, f Format) error {
	switch f {
	case PNG:
		return m.EncodePNG(w)
	case JPEG:
		if err := m.Validate(); err != nil {
			return err
		}
		if m.W == 0 || m.H == 0 {
			return fmt.Errorf("imaging: cannot encode an empty %d×%d image as JPEG", m.W, m.H)
		}
		if err := jpeg.Encode(w, m.Image(), &jpeg.Options{Quality: JPEGQuality}); err != nil {
			return fmt.Errorf("imaging: encoding JPEG: %w", err)
		}
		return nil
	}
	return fmt.Errorf("imaging: unknown image format %q", f)
}
