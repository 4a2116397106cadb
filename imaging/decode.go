package imaging

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"io/fs"
	"os"
)

// Limits bounds what Decode accepts.
type Limits struct {
	MaxPixels int64 // maximum width×height of the encoded image
	MaxBytes  int64 // maximum size of the encoded bytes
}

// DefaultLimits returns 50 megapixels and 64 MiB.
func DefaultLimits() Limits { return Limits{MaxPixels: 50_000_000, MaxBytes: 64 << 20} }

// Validate reports whether both limits are positive.
func (l Limits) Validate() error {
	if l.MaxPixels <= 0 || l.MaxBytes <= 0 {
		return fmt.Errorf("imaging: invalid limits: MaxPixels=%d MaxBytes=%d (both must be positive; see DefaultLimits)", l.MaxPixels, l.MaxBytes)
	}
	return nil
}

// DecodeInfo describes a decoded image.
type DecodeInfo struct {
	Format      string // "jpeg" or "png"
	Orientation int    // EXIF orientation applied, 1..8 (1 when absent or invalid)
	HadAlpha    bool   // some pixel was not fully opaque (its alpha was dropped)
	Grey        bool   // the source was greyscale (replicated to R=G=B)
	OrigW       int    // width as stored, before the orientation was applied
	OrigH       int    // height as stored, before the orientation was applied
}

var pngSignature = []byte("\x89PNG\r\n\x1a\n")

// sniff returns "jpeg", "png" or "".
func sniff(data []byte) string {
	switch {
	case len(data) >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF:
		return "jpeg"
	case bytes.HasPrefix(data, pngSignature):
		return "png"
	}
	return ""
}

// Decode decodes JPEG or PNG bytes into RGB. It applies the EXIF orientation
// of JPEGs (APP1 Exif, tag 0x0112, values 1..8; a missing or malformed EXIF
// block counts as orientation 1), converts greyscale, paletted, 16-bit and
// alpha images to 8-bit RGB (16-bit samples keep their high byte; alpha is
// dropped keeping straight colour values), and refuses images over
// lim.MaxPixels after reading only the header, before any pixel is decoded.
//
// The RGB bytes of a JPEG are exactly what image/jpeg decodes converted with
// color.YCbCrToRGB. Errors wrap ErrEmpty, ErrFormat or ErrTooLarge.
func Decode(data []byte, lim Limits) (*RGB, DecodeInfo, error) {
	var info DecodeInfo
	if err := lim.Validate(); err != nil {
		return nil, info, err
	}
	if len(data) == 0 {
		return nil, info, ErrEmpty
	}
	if int64(len(data)) > lim.MaxBytes {
		return nil, info, fmt.Errorf("%w: input is %d bytes, limit %d", ErrTooLarge, len(data), lim.MaxBytes)
	}
	info.Format = sniff(data)
	var (
		decodeConfig func(io.Reader) (image.Config, error)
		decode       func(io.Reader) (image.Image, error)
	)
	switch info.Format {
	case "jpeg":
		decodeConfig, decode = jpeg.DecodeConfig, jpeg.Decode
	case "png":
		decodeConfig, decode = png.DecodeConfig, png.Decode
	default:
		return nil, info, fmt.Errorf("%w: not a JPEG or PNG (%d bytes, no JPEG SOI marker or PNG signature)", ErrFormat, len(data))
	}
	cfg, err := decodeConfig(bytes.NewReader(data))
	if err != nil {
		return nil, info, fmt.Errorf("%w: %s header: %w", ErrFormat, info.Format, err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return nil, info, fmt.Errorf("%w: %s header: empty image %d×%d", ErrFormat, info.Format, cfg.Width, cfg.Height)
	}
	if px := int64(cfg.Width) * int64(cfg.Height); px > lim.MaxPixels {
		return nil, info, fmt.Errorf("%w: %s is %d×%d = %d pixels, limit %d", ErrTooLarge, info.Format, cfg.Width, cfg.Height, px, lim.MaxPixels)
	}
	img, err := decode(bytes.NewReader(data))
	if err != nil {
		return nil, info, fmt.Errorf("%w: %s %d×%d: decoding pixels: %w", ErrFormat, info.Format, cfg.Width, cfg.Height, err)
	}
	if b := img.Bounds(); b.Dx() != cfg.Width || b.Dy() != cfg.Height {
		return nil, info, fmt.Errorf("%w: %s: decoded %d×%d but header says %d×%d", ErrFormat, info.Format, b.Dx(), b.Dy(), cfg.Width, cfg.Height)
	}
	m, alpha, grey := toRGB(img)
	info.HadAlpha = alpha
	info.Grey = grey
	if info.Format == "png" && len(data) > 25 {
		// IHDR colour type 0 (grey) or 4 (grey+alpha): image/png returns
		// grey+alpha as NRGBA, so ask the header.
		info.Grey = info.Grey || data[25] == 0 || data[25] == 4
	}
	info.OrigW, info.OrigH = m.W, m.H
	info.Orientation = 1
	if info.Format == "jpeg" {
		// A malformed EXIF block is no reason to refuse the photo
		// (browsers ignore it too): the orientation is what could be read.
		x, _ := ReadJPEGEXIF(data)
		info.Orientation = x.Orientation
	}
	return Orient(m, info.Orientation), info, nil
}

// DecodeFile reads and decodes an image file (see Decode). Files larger than
// lim.MaxBytes are refused from their size before being read. Errors name
// the file once, in words for the user of a command (no package names).
func DecodeFile(path string, lim Limits) (*RGB, DecodeInfo, error) {
	if err := lim.Validate(); err != nil {
		return nil, DecodeInfo{}, err
	}
	data, err := ReadFile(path, lim.MaxBytes)
	if err != nil {
		return nil, DecodeInfo{}, err
	}
	m, info, err := Decode(data, lim)
	if err != nil {
		return nil, info, fmt.Errorf("%s: %w", path, err)
	}
	return m, info, nil
}

// ReadFile reads an image file's bytes, for a caller that needs them
// before decoding (to key a cache, say) and then calls Decode. A file
// larger than maxBytes is refused from its size before being read (with
// ErrTooLarge), a folder is refused, and at most maxBytes+1 bytes are read
// so that a file growing after the size check is still caught by Decode.
// Errors name the file once, as DecodeFile's do.
func ReadFile(path string, maxBytes int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fileError(path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fileError(path, err)
	}
	if st.IsDir() {
		return nil, fmt.Errorf("%s is a folder, not an image file", path)
	}
	if st.Size() > maxBytes {
		return nil, fmt.Errorf("%s: %w: file is %d bytes, limit %d", path, ErrTooLarge, st.Size(), maxBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, fileError(path, err)
	}
	return data, nil
}

// fileError words an error opening or reading path: "cannot read
// photo.jpg: permission denied", naming the file once (an *fs.PathError
// names it already, with the system call).
func fileError(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("cannot read %s: %w", path, err)
}

// toRGB converts a decoded image to RGB, reporting whether any pixel was
// translucent and whether the image was greyscale. Common types take fast
// paths that never call the image.Image interface per pixel.
func toRGB(img image.Image) (m *RGB, alpha, grey bool) {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	m = NewRGB(w, h)
	p := m.Pix
	switch src := img.(type) {
	case *image.YCbCr:
		ycbcrToRGB(src, m)
	case *image.Gray:
		grey = true
		for y := 0; y < h; y++ {
			row := src.Pix[y*src.Stride : y*src.Stride+w]
			o := p[3*y*w : 3*(y+1)*w]
			for x, v := range row {
				o[3*x], o[3*x+1], o[3*x+2] = v, v, v
			}
		}
	case *image.Gray16:
		grey = true
		for y := 0; y < h; y++ {
			row := src.Pix[y*src.Stride : y*src.Stride+2*w]
			o := p[3*y*w : 3*(y+1)*w]
			for x := 0; x < w; x++ {
				v := row[2*x]
				o[3*x], o[3*x+1], o[3*x+2] = v, v, v
			}
		}
	case *image.NRGBA:
		for y := 0; y < h; y++ {
			row := src.Pix[y*src.Stride : y*src.Stride+4*w]
			o := p[3*y*w : 3*(y+1)*w]
			for x := 0; x < w; x++ {
				o[3*x], o[3*x+1], o[3*x+2] = row[4*x], row[4*x+1], row[4*x+2]
				if row[4*x+3] != 0xFF {
					alpha = true
				}
			}
		}
	case *image.NRGBA64:
		for y := 0; y < h; y++ {
			row := src.Pix[y*src.Stride : y*src.Stride+8*w]
			o := p[3*y*w : 3*(y+1)*w]
			for x := 0; x < w; x++ {
				o[3*x], o[3*x+1], o[3*x+2] = row[8*x], row[8*x+2], row[8*x+4]
				if row[8*x+6] != 0xFF || row[8*x+7] != 0xFF {
					alpha = true
				}
			}
		}
	case *image.RGBA:
		for y := 0; y < h; y++ {
			row := src.Pix[y*src.Stride : y*src.Stride+4*w]
			o := p[3*y*w : 3*(y+1)*w]
			for x := 0; x < w; x++ {
				if a := row[4*x+3]; a != 0xFF {
					alpha = true
					c := color.NRGBAModel.Convert(color.RGBA{row[4*x], row[4*x+1], row[4*x+2], a}).(color.NRGBA)
					o[3*x], o[3*x+1], o[3*x+2] = c.R, c.G, c.B
					continue
				}
				o[3*x], o[3*x+1], o[3*x+2] = row[4*x], row[4*x+1], row[4*x+2]
			}
		}
	case *image.RGBA64:
		for y := 0; y < h; y++ {
			row := src.Pix[y*src.Stride : y*src.Stride+8*w]
			o := p[3*y*w : 3*(y+1)*w]
			for x := 0; x < w; x++ {
				if row[8*x+6] != 0xFF || row[8*x+7] != 0xFF {
					alpha = true
					c := color.NRGBA64Model.Convert(src.RGBA64At(b.Min.X+x, b.Min.Y+y)).(color.NRGBA64)
					o[3*x], o[3*x+1], o[3*x+2] = uint8(c.R>>8), uint8(c.G>>8), uint8(c.B>>8)
					continue
				}
				o[3*x], o[3*x+1], o[3*x+2] = row[8*x], row[8*x+2], row[8*x+4]
			}
		}
	case *image.Paletted:
		// Indexes beyond the palette are black. A paletted image counts as
		// colour even if its palette happens to be grey.
		var pal [256][3]uint8
		for i, c := range src.Palette {
			if i >= 256 {
				break
			}
			n := color.NRGBAModel.Convert(c).(color.NRGBA)
			pal[i] = [3]uint8{n.R, n.G, n.B}
		}
		alpha = !src.Opaque()
		for y := 0; y < h; y++ {
			row := src.Pix[y*src.Stride : y*src.Stride+w]
			o := p[3*y*w : 3*(y+1)*w]
			for x, v := range row {
				c := &pal[v]
				o[3*x], o[3*x+1], o[3*x+2] = c[0], c[1], c[2]
			}
		}
	case *image.CMYK:
		for y := 0; y < h; y++ {
			row := src.Pix[y*src.Stride : y*src.Stride+4*w]
			o := p[3*y*w : 3*(y+1)*w]
			for x := 0; x < w; x++ {
				o[3*x], o[3*x+1], o[3*x+2] = color.CMYKToRGB(row[4*x], row[4*x+1], row[4*x+2], row[4*x+3])
			}
		}
	default:
		m, alpha = toRGBGeneric(img), !isOpaque(img)
	}
	return m, alpha, grey
}

func isOpaque(img image.Image) bool {
	if o, ok := img.(interface{ Opaque() bool }); ok {
		return o.Opaque()
	}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if _, _, _, a := img.At(x, y).RGBA(); a != 0xFFFF {
				return false
			}
		}
	}
	return true
}

// toRGBGeneric converts any image through the image.Image interface,
// keeping straight (non-premultiplied) colour.
func toRGBGeneric(img image.Image) *RGB {
	b := img.Bounds()
	m := NewRGB(b.Dx(), b.Dy())
	for y := 0; y < m.H; y++ {
		for x := 0; x < m.W; x++ {
			c := color.NRGBA64Model.Convert(img.At(b.Min.X+x, b.Min.Y+y)).(color.NRGBA64)
			i := 3 * (y*m.W + x)
			m.Pix[i], m.Pix[i+1], m.Pix[i+2] = uint8(c.R>>8), uint8(c.G>>8), uint8(c.B>>8)
		}
	}
	return m
}

// ycbcrToRGB converts with exactly the arithmetic of color.YCbCrToRGB
// (inlined here; TestYCbCrMatchesStdlib checks all 2^24 inputs and
// TestYCbCrSubsampling every subsampling ratio against image.YCbCr.At).
func ycbcrToRGB(src *image.YCbCr, m *RGB) {
	b := src.Rect
	w, h := b.Dx(), b.Dy()
	var shift uint // log2 of the horizontal chroma subsampling
	switch src.SubsampleRatio {
	case image.YCbCrSubsampleRatio422, image.YCbCrSubsampleRatio420:
		shift = 1
	case image.YCbCrSubsampleRatio411, image.YCbCrSubsampleRatio410:
		shift = 2
	}
	if b.Min.X < 0 { // COffset divides absolute coordinates; keep shifts non-negative
		m2 := toRGBGeneric(src)
		copy(m.Pix, m2.Pix)
		return
	}
	base := b.Min.X >> shift
	for y := 0; y < h; y++ {
		yrow := src.Y[src.YOffset(b.Min.X, b.Min.Y+y):]
		yrow = yrow[:w]
		c0 := src.COffset(b.Min.X, b.Min.Y+y)
		nc := ((b.Min.X+w-1)>>shift - base) + 1
		cbRow := src.Cb[c0 : c0+nc]
		crRow := src.Cr[c0 : c0+nc]
		o := m.Pix[3*y*w : 3*(y+1)*w]
		for x, yv := range yrow {
			ci := (b.Min.X+x)>>shift - base
			yy1 := int32(yv) * 0x10101
			cb1 := int32(cbRow[ci]) - 128
			cr1 := int32(crRow[ci]) - 128
			r := yy1 + 91881*cr1
			if uint32(r)&0xff000000 == 0 {
				r >>= 16
			} else {
				r = ^(r >> 31)
			}
			g := yy1 - 22554*cb1 - 46802*cr1
			if uint32(g)&0xff000000 == 0 {
				g >>= 16
			} else {
				g = ^(g >> 31)
			}
			bb := yy1 + 116130*cb1
			if uint32(bb)&0xff000000 == 0 {
				bb >>= 16
			} else {
				bb = ^(bb >> 31)
			}
			p := o[3*x : 3*x+3 : 3*x+3]
			p[0], p[1], p[2] = uint8(r), uint8(g), uint8(bb)
		}
	}
}

// Orient returns m transformed from its stored layout to the display layout
// of EXIF orientation o (1 = as stored, 2 = mirror horizontally, 3 = rotate
// 180°, 4 = mirror vertically, 5 = transpose, 6 = rotate 90° clockwise,
// 7 = transverse, 8 = rotate 90° counter-clockwise). Other values return m.
func Orient(m *RGB, o int) *RGB {
	if o < 2 || o > 8 {
		return m
	}
	W, H := m.W, m.H
	var out *RGB
	if o >= 5 {
		out = NewRGB(H, W)
	} else {
		out = NewRGB(W, H)
	}
	// src maps a display pixel to its stored pixel.
	var src func(x, y int) (int, int)
	switch o {
	case 2:
		src = func(x, y int) (int, int) { return W - 1 - x, y }
	case 3:
		src = func(x, y int) (int, int) { return W - 1 - x, H - 1 - y }
	case 4:
		src = func(x, y int) (int, int) { return x, H - 1 - y }
	case 5:
		src = func(x, y int) (int, int) { return y, x }
	case 6:
		src = func(x, y int) (int, int) { return y, H - 1 - x }
	case 7:
		src = func(x, y int) (int, int) { return W - 1 - y, H - 1 - x }
	case 8:
		src = func(x, y int) (int, int) { return W - 1 - y, x }
	}
	for y := 0; y < out.H; y++ {
		for x := 0; x < out.W; x++ {
			sx, sy := src(x, y)
			i, j := 3*(y*out.W+x), 3*(sy*W+sx)
			out.Pix[i], out.Pix[i+1], out.Pix[i+2] = m.Pix[j], m.Pix[j+1], m.Pix[j+2]
		}
	}
	return out
}
