package imaging

import (
	"bytes"
	"encoding/binary"
	"image"
	"image/color"
	"testing"
)

// exifPayload builds an APP1 Exif payload whose IFD0 holds a filler tag and
// the orientation tag, in either byte order.
func exifPayload(bo binary.ByteOrder, orientation uint16) []byte {
	var b bytes.Buffer
	b.WriteString("Exif\x00\x00")
	if bo == binary.LittleEndian {
		b.WriteString("II")
	} else {
		b.WriteString("MM")
	}
	w16 := func(v uint16) { _ = binary.Write(&b, bo, v) }
	w32 := func(v uint32) { _ = binary.Write(&b, bo, v) }
	w16(42)
	w32(8)      // IFD0 offset
	w16(2)      // entries
	w16(0x010F) // Make, ASCII, 4 bytes inline
	w16(2)
	w32(4)
	b.WriteString("Veil")
	w16(0x0112) // Orientation, SHORT×1
	w16(3)
	w32(1)
	w16(orientation)
	w16(0)
	w32(0) // next IFD
	return b.Bytes()
}

// withAPP1 splices an APP1 segment right after the SOI marker.
func withAPP1(jpg, payload []byte) []byte {
	out := append([]byte{}, jpg[:2]...)
	out = append(out, 0xFF, 0xE1, byte((len(payload)+2)>>8), byte(len(payload)+2))
	out = append(out, payload...)
	return append(out, jpg[2:]...)
}

func TestParseExifOrientation(t *testing.T) {
	le := exifPayload(binary.LittleEndian, 6)
	tests := []struct {
		name    string
		payload []byte
		want    int
		ok      bool
	}{
		{"little-endian", le, 6, true},
		{"big-endian", exifPayload(binary.BigEndian, 8), 8, true},
		{"value-0", exifPayload(binary.BigEndian, 0), 0, false},
		{"value-9", exifPayload(binary.LittleEndian, 9), 0, false},
		{"no-header", le[6:], 0, false},
		{"empty", nil, 0, false},
		{"header-only", le[:6], 0, false},
		{"bad-order", append([]byte("Exif\x00\x00XX"), le[8:]...), 0, false},
		{"bad-magic", func() []byte { p := bytes.Clone(le); p[8] = 43; return p }(), 0, false},
		{"ifd-offset-past-end", func() []byte { p := bytes.Clone(le); binary.LittleEndian.PutUint32(p[10:], 0xFFFFFFF0); return p }(), 0, false},
		{"entry-count-too-big-tag-found-first", func() []byte { p := bytes.Clone(le); binary.LittleEndian.PutUint16(p[14:], 0xFFFF); return p }(), 6, true},
		{"entry-count-too-big-no-tag", func() []byte {
			p := bytes.Clone(le)
			binary.LittleEndian.PutUint16(p[14:], 0xFFFF)
			binary.LittleEndian.PutUint16(p[16+12:], 0x0131)
			return p
		}(), 0, false},
		{"no-orientation-tag", func() []byte { p := bytes.Clone(le); binary.LittleEndian.PutUint16(p[16+12:], 0x0131); return p }(), 0, false},
		{"truncated-entry", le[:len(le)-12], 0, false},
		{"wrong-type", func() []byte { p := bytes.Clone(le); binary.LittleEndian.PutUint16(p[16+12+2:], 2); return p }(), 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseExifOrientation(tc.payload)
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("got %d, %v; want %d (ok=%v)", got, err, tc.want, tc.ok)
			}
		})
	}
}

// TestOrientation encodes a 32×16 JPEG with four solid quadrants (red,
// green / blue, white as stored) under each EXIF orientation and checks the
// display layout written out by hand from the EXIF specification.
func TestOrientation(t *testing.T) {
	const W, H = 32, 16
	R, G, B, Wh := color.RGBA{255, 0, 0, 255}, color.RGBA{0, 255, 0, 255}, color.RGBA{0, 0, 255, 255}, color.RGBA{255, 255, 255, 255}
	img := image.NewRGBA(image.Rect(0, 0, W, H))
	for y := 0; y < H; y++ {
		for x := 0; x < W; x++ {
			c := [2][2]color.RGBA{{R, G}, {B, Wh}}[y*2/H][x*2/W]
			img.SetRGBA(x, y, c)
		}
	}
	jpg := encodeJPEG(t, img, 100)
	// Display quadrants top-left, top-right, bottom-left, bottom-right.
	tests := []struct {
		o    int
		w, h int
		quad [4]color.RGBA
	}{
		{1, W, H, [4]color.RGBA{R, G, B, Wh}},
		{2, W, H, [4]color.RGBA{G, R, Wh, B}}, // mirror horizontal
		{3, W, H, [4]color.RGBA{Wh, B, G, R}}, // rotate 180
		{4, W, H, [4]color.RGBA{B, Wh, R, G}}, // mirror vertical
		{5, H, W, [4]color.RGBA{R, B, G, Wh}}, // transpose
		{6, H, W, [4]color.RGBA{B, R, Wh, G}}, // rotate 90 CW
		{7, H, W, [4]color.RGBA{Wh, G, B, R}}, // transverse
		{8, H, W, [4]color.RGBA{G, Wh, R, B}}, // rotate 90 CCW
	}
	for _, bo := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		for _, tc := range tests {
			data := withAPP1(jpg, exifPayload(bo, uint16(tc.o)))
			m, info, err := Decode(data, DefaultLimits())
			if err != nil {
				t.Fatalf("orientation %d: %v", tc.o, err)
			}
			if info.Orientation != tc.o || info.OrigW != W || info.OrigH != H || m.W != tc.w || m.H != tc.h {
				t.Fatalf("orientation %d (%v): %d×%d, info %+v", tc.o, bo, m.W, m.H, info)
			}
			centres := [4][2]int{{m.W / 4, m.H / 4}, {3 * m.W / 4, m.H / 4}, {m.W / 4, 3 * m.H / 4}, {3 * m.W / 4, 3 * m.H / 4}}
			for q, c := range centres {
				r, g, b := m.At(c[0], c[1])
				want := tc.quad[q]
				if abs(int(r)-int(want.R)) > 8 || abs(int(g)-int(want.G)) > 8 || abs(int(b)-int(want.B)) > 8 {
					t.Errorf("orientation %d (%v) quadrant %d: %d %d %d, want %v", tc.o, bo, q, r, g, b, want)
				}
			}
			// Pixel-exact: the oriented image is a permutation of the
			// stored one.
			plain, _, err := Decode(jpg, DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(Orient(plain, tc.o).Pix, m.Pix) {
				t.Errorf("orientation %d: pixels differ from Orient of the plain decode", tc.o)
			}
		}
	}
	// A malformed EXIF block is ignored, not an error.
	m, info, err := Decode(withAPP1(jpg, []byte("Exif\x00\x00MM\x00*\xff\xff\xff\xff")), DefaultLimits())
	if err != nil || info.Orientation != 1 || m.W != W {
		t.Errorf("malformed EXIF: %v %+v", err, info)
	}
}

// TestOrientPixelMap checks Orient's exact pixel mapping on a 3×2 image.
func TestOrientPixelMap(t *testing.T) {
	// Stored:  a b c
	//          d e f
	src := &RGB{W: 3, H: 2, Pix: []uint8{'a', 0, 0, 'b', 0, 0, 'c', 0, 0, 'd', 0, 0, 'e', 0, 0, 'f', 0, 0}}
	tests := []struct {
		o    int
		want string // rows, display layout
	}{
		{1, "abc/def"}, {2, "cba/fed"}, {3, "fed/cba"}, {4, "def/abc"},
		{5, "ad/be/cf"}, {6, "da/eb/fc"}, {7, "fc/eb/da"}, {8, "cf/be/ad"},
	}
	for _, tc := range tests {
		m := Orient(src, tc.o)
		var got []byte
		for y := 0; y < m.H; y++ {
			if y > 0 {
				got = append(got, '/')
			}
			for x := 0; x < m.W; x++ {
				r, _, _ := m.At(x, y)
				got = append(got, r)
			}
		}
		if string(got) != tc.want {
			t.Errorf("orientation %d: %s, want %s", tc.o, got, tc.want)
		}
	}
}

func FuzzExif(f *testing.F) {
	f.Add(exifPayload(binary.LittleEndian, 6))
	f.Add(exifPayload(binary.BigEndian, 3))
	f.Add([]byte("Exif\x00\x00MM\x00*\x00\x00\x00\x08\xff\xff"))
	f.Add([]byte("Exif\x00\x00"))
	f.Fuzz(func(t *testing.T, payload []byte) {
		o, err := ParseExifOrientation(payload)
		if err == nil && (o < 1 || o > 8) {
			t.Fatalf("orientation %d accepted", o)
		}
		if o2 := jpegOrientation(withAPP1([]byte{0xFF, 0xD8, 0xFF, 0xD9}, payload)); o2 < 1 || o2 > 8 {
			t.Fatalf("jpegOrientation %d", o2)
		}
	})
}

func FuzzDecode(f *testing.F) {
	img := image.NewNRGBA(image.Rect(0, 0, 6, 5))
	for i := range img.Pix {
		img.Pix[i] = uint8(i * 37)
	}
	jpg := encodeJPEG(f, img, 80)
	f.Add(jpg)
	f.Add(withAPP1(jpg, exifPayload(binary.LittleEndian, 6)))
	f.Add(encodePNG(f, img))
	f.Add(encodePNG(f, image.NewGray16(image.Rect(0, 0, 3, 3))))
	f.Add(encodePNG(f, image.NewPaletted(image.Rect(0, 0, 3, 3), color.Palette{color.Black, color.White})))
	f.Add(patchPNGSize(f, encodePNG(f, img), 20000, 20000))
	f.Add([]byte{0xFF, 0xD8, 0xFF})
	f.Add([]byte("\x89PNG\r\n\x1a\n"))
	lim := Limits{MaxPixels: 1 << 16, MaxBytes: 1 << 20}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, info, err := Decode(data, lim)
		if err != nil {
			if m != nil {
				t.Fatal("image with error")
			}
			return
		}
		if m.Validate() != nil || m.W <= 0 || m.H <= 0 || int64(m.W)*int64(m.H) > lim.MaxPixels {
			t.Fatalf("bad image %d×%d (%d bytes)", m.W, m.H, len(m.Pix))
		}
		if info.Orientation < 1 || info.Orientation > 8 {
			t.Fatalf("orientation %d", info.Orientation)
		}
	})
}
