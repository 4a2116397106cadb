package imaging

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"github.com/veil-privacy/veil/internal/datadir"
	"image"
	"image/color"
	"os"
	"path/filepath"
	"testing"
)

var updateEXIFTestdata = flag.Bool("update-exif-testdata", false, "rewrite imaging/testdata/exif-*.jpg")

// tiffEntry is one IFD entry for buildEXIF; data longer than 4 bytes goes
// to the data area and the entry holds its offset.
type tiffEntry struct {
	tag, typ uint16
	count    uint32
	data     []byte
}

func asciiEntry(tag uint16, s string) tiffEntry {
	return tiffEntry{tag: tag, typ: typeASCII, count: uint32(len(s) + 1), data: append([]byte(s), 0)}
}

func shortEntry(bo binary.ByteOrder, tag, v uint16) tiffEntry {
	d := make([]byte, 4)
	bo.PutUint16(d, v)
	return tiffEntry{tag: tag, typ: typeShort, count: 1, data: d}
}

// buildEXIF lays out an APP1 Exif payload: TIFF header, IFD0 (with an
// Exif IFD pointer appended when sub is not nil), the Exif IFD, then the
// data area. exifPtr, when not zero, replaces the pointer's value.
func buildEXIF(bo binary.ByteOrder, ifd0, sub []tiffEntry, exifPtr uint32) []byte {
	if sub != nil {
		ifd0 = append(append([]tiffEntry{}, ifd0...), tiffEntry{tag: tagExifIFD, typ: typeLong, count: 1})
	}
	ifdSize := func(n int) int { return 2 + 12*n + 4 }
	off0 := 8
	offSub := off0 + ifdSize(len(ifd0))
	data := offSub
	if sub != nil {
		data += ifdSize(len(sub))
	}
	var area []byte
	write := func(b *bytes.Buffer, es []tiffEntry) {
		_ = binary.Write(b, bo, uint16(len(es)))
		for _, e := range es {
			_ = binary.Write(b, bo, e.tag)
			_ = binary.Write(b, bo, e.typ)
			_ = binary.Write(b, bo, e.count)
			v := make([]byte, 4)
			switch {
			case e.tag == tagExifIFD && e.data == nil:
				p := uint32(offSub)
				if exifPtr != 0 {
					p = exifPtr
				}
				bo.PutUint32(v, p)
			case len(e.data) <= 4:
				copy(v, e.data)
			default:
				bo.PutUint32(v, uint32(data+len(area)))
				area = append(area, e.data...)
			}
			b.Write(v)
		}
		_ = binary.Write(b, bo, uint32(0)) // no next IFD
	}
	var b bytes.Buffer
	b.WriteString("Exif\x00\x00")
	if bo == binary.LittleEndian {
		b.WriteString("II")
	} else {
		b.WriteString("MM")
	}
	_ = binary.Write(&b, bo, uint16(42))
	_ = binary.Write(&b, bo, uint32(off0))
	var t bytes.Buffer
	write(&t, ifd0)
	if sub != nil {
		write(&t, sub)
	}
	b.Write(t.Bytes())
	b.Write(area)
	return b.Bytes()
}

// exifPayload builds an APP1 Exif payload whose IFD0 holds a filler tag
// (Make, 4 ASCII bytes inline) and the orientation tag, in either byte
// order: 2 entries at payload offsets 16 and 28.
func exifPayload(bo binary.ByteOrder, orientation uint16) []byte {
	make4 := tiffEntry{tag: 0x010F, typ: typeASCII, count: 4, data: []byte("Veil")}
	return buildEXIF(bo, []tiffEntry{make4, shortEntry(bo, tagOrientation, orientation)}, nil, 0)
}

// withAPP1 splices an APP1 segment right after the SOI marker.
func withAPP1(jpg, payload []byte) []byte {
	out := append([]byte{}, jpg[:2]...)
	out = append(out, 0xFF, 0xE1, byte((len(payload)+2)>>8), byte(len(payload)+2))
	out = append(out, payload...)
	return append(out, jpg[2:]...)
}

// tinyJPEG encodes a w×h gradient.
func tinyJPEG(t testing.TB, w, h int) []byte {
	t.Helper()
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			m.Set(x, y, color.RGBA{uint8(255 * x / w), uint8(255 * y / h), 128, 255})
		}
	}
	return encodeJPEG(t, m, 50)
}

// exifCases are the testdata files: how each is built and what ParseEXIF
// must read from it.
var exifCases = []struct {
	file        string
	build       func(t testing.TB) []byte
	taken       string
	orientation int
	w, h        int // dimensions after orientation
	err         bool
}{
	{"exif-le-full.jpg", func(t testing.TB) []byte {
		le := binary.LittleEndian
		return withAPP1(tinyJPEG(t, 12, 8), buildEXIF(le,
			[]tiffEntry{asciiEntry(0x010F, "Veil"), shortEntry(le, tagOrientation, 6), asciiEntry(0x0132, "2024:01:01 00:00:00")},
			[]tiffEntry{asciiEntry(tagDateTimeOriginal, "2019:07:14 16:05:09"), asciiEntry(tagOffsetTimeOriginal, "+02:00"), asciiEntry(tagSubSecTimeOriginal, "25")}, 0))
	}, "2019-07-14T16:05:09.25+02:00", 6, 8, 12, false},
	{"exif-be-original.jpg", func(t testing.TB) []byte {
		be := binary.BigEndian
		return withAPP1(tinyJPEG(t, 12, 8), buildEXIF(be,
			[]tiffEntry{shortEntry(be, tagOrientation, 1)},
			[]tiffEntry{asciiEntry(tagDateTimeDigitized, "2016:08:13 09:00:00"), asciiEntry(tagDateTimeOriginal, "2016:08:13 01:11:41")}, 0))
	}, "2016-08-13T01:11:41", 1, 12, 8, false},
	{"exif-digitized-only.jpg", func(t testing.TB) []byte {
		be := binary.BigEndian
		return withAPP1(tinyJPEG(t, 12, 8), buildEXIF(be, nil,
			[]tiffEntry{asciiEntry(tagDateTimeDigitized, "2005:02:28 23:59:59")}, 0))
	}, "2005-02-28T23:59:59", 1, 12, 8, false},
	{"exif-unset-clock.jpg", func(t testing.TB) []byte {
		le := binary.LittleEndian
		return withAPP1(tinyJPEG(t, 12, 8), buildEXIF(le,
			[]tiffEntry{shortEntry(le, tagOrientation, 3)},
			[]tiffEntry{asciiEntry(tagDateTimeOriginal, "0000:00:00 00:00:00"), asciiEntry(tagDateTimeDigitized, "    :  :     :  :  ")}, 0))
	}, "", 3, 12, 8, false},
	{"exif-orientation-only.jpg", func(t testing.TB) []byte {
		le := binary.LittleEndian
		return withAPP1(tinyJPEG(t, 12, 8), buildEXIF(le, []tiffEntry{shortEntry(le, tagOrientation, 8)}, nil, 0))
	}, "", 8, 8, 12, false},
	{"exif-none.jpg", func(t testing.TB) []byte { return tinyJPEG(t, 12, 8) }, "", 1, 12, 8, false},
	{"exif-loop.jpg", func(t testing.TB) []byte {
		// The Exif IFD pointer points back at IFD0: read once, no loop.
		le := binary.LittleEndian
		return withAPP1(tinyJPEG(t, 12, 8), buildEXIF(le, []tiffEntry{shortEntry(le, tagOrientation, 2)}, []tiffEntry{}, 8))
	}, "", 2, 12, 8, false},
	{"exif-bad-subifd.jpg", func(t testing.TB) []byte {
		le := binary.LittleEndian
		return withAPP1(tinyJPEG(t, 12, 8), buildEXIF(le, []tiffEntry{shortEntry(le, tagOrientation, 6)}, []tiffEntry{}, 0xFFFFFF00))
	}, "", 6, 8, 12, true},
	{"exif-date-past-end.jpg", func(t testing.TB) []byte {
		// DateTimeOriginal's offset points past the block: ignored.
		be := binary.BigEndian
		p := buildEXIF(be, nil, []tiffEntry{asciiEntry(tagDateTimeOriginal, "2019:07:14 16:05:09")}, 0)
		return withAPP1(tinyJPEG(t, 12, 8), p[:len(p)-10])
	}, "", 1, 12, 8, false},
}

// TestWriteEXIFTestdata rewrites the fixtures with -update-exif-testdata
// and otherwise checks that they are what the builders make, so the files
// and their descriptions cannot drift apart.
func TestWriteEXIFTestdata(t *testing.T) {
	for _, tc := range exifCases {
		path := filepath.Join("testdata", tc.file)
		b := tc.build(t)
		if *updateEXIFTestdata {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./imaging -run TestWriteEXIFTestdata -update-exif-testdata)", err)
		}
		if !bytes.Equal(got, b) {
			t.Errorf("%s differs from what its builder makes", path)
		}
	}
}

func TestReadJPEGEXIF(t *testing.T) {
	for _, tc := range exifCases {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			x, err := ReadJPEGEXIF(data)
			if (err != nil) != tc.err {
				t.Fatalf("error %v, want error: %v", err, tc.err)
			}
			if err != nil && !errors.Is(err, ErrEXIF) {
				t.Errorf("error %v does not wrap ErrEXIF", err)
			}
			if got := x.TakenString(); got != tc.taken {
				t.Errorf("taken %q, want %q", got, tc.taken)
			}
			if x.Orientation != tc.orientation {
				t.Errorf("orientation %d, want %d", x.Orientation, tc.orientation)
			}
			// The decoder applies the same orientation, so the
			// dimensions recorded are those of the displayed photo.
			m, info, err := Decode(data, DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			if info.Orientation != tc.orientation || m.W != tc.w || m.H != tc.h {
				t.Errorf("decoder: orientation %d, %d×%d; want %d, %d×%d", info.Orientation, m.W, m.H, tc.orientation, tc.w, tc.h)
			}
		})
	}
}

// TestReadJPEGEXIFCameraFiles reads the EXIF of real photos (face-api's
// sample images, written by a camera and an editor in big-endian TIFF):
// DateTimeOriginal, not IFD0's later DateTime, must be the time taken.
func TestReadJPEGEXIFCameraFiles(t *testing.T) {
	dir := datadir.ForTest(t, "faceapi-reference", "images")
	want := map[string]string{
		"sample1.jpg": "2017-10-31T20:16:18", // DateTime is 2017:11:01 12:51:52
		"sample2.jpg": "2016-08-13T01:11:41",
		"sample6.jpg": "2018-05-05T19:42:10",
	}
	for name, taken := range want {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		x, err := ReadJPEGEXIF(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := x.TakenString(); got != taken {
			t.Errorf("%s: taken %q, want %q", name, got, taken)
		}
		if x.Orientation < 1 || x.Orientation > 8 {
			t.Errorf("%s: orientation %d", name, x.Orientation)
		}
	}
}

// TestParseEXIFOrientation reads IFD0's orientation as the decoder
// applies it, from payloads of exifPayload's layout modified byte by byte.
func TestParseEXIFOrientation(t *testing.T) {
	le := exifPayload(binary.LittleEndian, 6)
	tests := []struct {
		name    string
		payload []byte
		want    int
		err     bool
	}{
		{"little-endian", le, 6, false},
		{"big-endian", exifPayload(binary.BigEndian, 8), 8, false},
		{"value-0", exifPayload(binary.BigEndian, 0), 1, false},
		{"value-9", exifPayload(binary.LittleEndian, 9), 1, false},
		{"no-header", le[6:], 1, true},
		{"empty", nil, 1, true},
		{"header-only", le[:6], 1, true},
		{"bad-order", append([]byte("Exif\x00\x00XX"), le[8:]...), 1, true},
		{"bad-magic", func() []byte { p := bytes.Clone(le); p[8] = 43; return p }(), 1, true},
		{"ifd-offset-past-end", func() []byte { p := bytes.Clone(le); binary.LittleEndian.PutUint32(p[10:], 0xFFFFFFF0); return p }(), 1, true},
		// As browsers do, the entries inside the block are read even
		// when IFD0 claims more.
		{"entry-count-too-big-tag-found-first", func() []byte { p := bytes.Clone(le); binary.LittleEndian.PutUint16(p[14:], 0xFFFF); return p }(), 6, true},
		{"entry-count-too-big-no-tag", func() []byte {
			p := bytes.Clone(le)
			binary.LittleEndian.PutUint16(p[14:], 0xFFFF)
			binary.LittleEndian.PutUint16(p[16+12:], 0x0131)
			return p
		}(), 1, true},
		{"no-orientation-tag", func() []byte { p := bytes.Clone(le); binary.LittleEndian.PutUint16(p[16+12:], 0x0131); return p }(), 1, false},
		{"truncated-entry", le[:len(le)-12], 1, true},
		{"wrong-type", func() []byte { p := bytes.Clone(le); binary.LittleEndian.PutUint16(p[16+12+2:], 2); return p }(), 1, false},
		{"second-tag-ignored", buildEXIF(binary.LittleEndian, []tiffEntry{shortEntry(binary.LittleEndian, tagOrientation, 0), shortEntry(binary.LittleEndian, tagOrientation, 6)}, nil, 0), 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x, err := ParseEXIF(tc.payload)
			if (err != nil) != tc.err || x.Orientation != tc.want {
				t.Errorf("got %d, %v; want %d (error: %v)", x.Orientation, err, tc.want, tc.err)
			}
			if err != nil && !errors.Is(err, ErrEXIF) {
				t.Errorf("error %v does not wrap ErrEXIF", err)
			}
		})
	}
}

func TestParseEXIFStructureErrors(t *testing.T) {
	le := binary.LittleEndian
	good := buildEXIF(le, []tiffEntry{shortEntry(le, tagOrientation, 6)}, []tiffEntry{asciiEntry(tagDateTimeOriginal, "2019:07:14 16:05:09")}, 0)
	set16 := func(at int, v uint16) []byte { p := bytes.Clone(good); le.PutUint16(p[at:], v); return p }
	set32 := func(at int, v uint32) []byte { p := bytes.Clone(good); le.PutUint32(p[at:], v); return p }
	tests := []struct {
		name        string
		payload     []byte
		orientation int // read from IFD0's entries inside the block
	}{
		{"empty", nil, 1},
		{"no-header", good[6:], 1},
		{"header-only", good[:6], 1},
		{"tiff-truncated", good[:12], 1},
		{"bad-order", append([]byte("Exif\x00\x00XX"), good[8:]...), 1},
		{"bad-magic", set16(8, 43), 1},
		{"ifd0-offset-past-end", set32(10, 0xFFFFFFF0), 1},
		{"ifd0-offset-inside-header", set32(10, 4), 1},
		{"ifd0-too-many-entries", set16(14, maxIFDEntries+1), 6},
		{"ifd0-entries-past-end", set16(14, 200), 6},
		{"exif-ifd-too-many-entries", set16(6+8+2+12*2+4, maxIFDEntries+1), 6},
		{"exif-ifd-entries-past-end", set16(6+8+2+12*2+4, 5), 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x, err := ParseEXIF(tc.payload)
			if !errors.Is(err, ErrEXIF) {
				t.Fatalf("error %v, want one wrapping ErrEXIF", err)
			}
			if x.Orientation != tc.orientation || !x.Taken.IsZero() {
				t.Errorf("a refused block gave %+v, want orientation %d and no time", x, tc.orientation)
			}
		})
	}
	if x, err := ParseEXIF(good); err != nil || x.Orientation != 6 || x.TakenString() != "2019-07-14T16:05:09" {
		t.Fatalf("the unmodified block: %+v, %v", x, err)
	}
}

func TestParseEXIFTimes(t *testing.T) {
	tests := []struct {
		orig, off, sub string
		want           string
	}{
		{"2019:07:14 16:05:09", "", "", "2019-07-14T16:05:09"},
		{"2019:07:14 16:05:09", "-05:30", "", "2019-07-14T16:05:09-05:30"},
		{"2019:07:14 16:05:09", "+00:00", "007", "2019-07-14T16:05:09.007Z"},
		{"2019:07:14 16:05:09", "+25:00", "", "2019-07-14T16:05:09"},  // offset out of range: no zone
		{"2019:07:14 16:05:09", "02:00", "x1", "2019-07-14T16:05:09"}, // malformed offset and fraction
		{"2019:02:30 16:05:09", "", "", ""},                           // no such day
		{"2019-07-14 16:05:09", "", "", ""},                           // wrong separators
		{"2019:07:14 16:05:09 ", "", "", "2019-07-14T16:05:09"},       // trailing space trimmed
		{"2019:07:14 16:05:09.123456789012", "", "", ""},              // too long for the field
	}
	for _, tc := range tests {
		sub := []tiffEntry{asciiEntry(tagDateTimeOriginal, tc.orig)}
		if tc.off != "" {
			sub = append(sub, asciiEntry(tagOffsetTimeOriginal, tc.off))
		}
		if tc.sub != "" {
			sub = append(sub, asciiEntry(tagSubSecTimeOriginal, tc.sub))
		}
		x, err := ParseEXIF(buildEXIF(binary.BigEndian, nil, sub, 0))
		if err != nil {
			t.Fatalf("%q: %v", tc.orig, err)
		}
		if got := x.TakenString(); got != tc.want {
			t.Errorf("%q %q %q: taken %q, want %q", tc.orig, tc.off, tc.sub, got, tc.want)
		}
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

// FuzzEXIF feeds arbitrary bytes to the JPEG walker and the EXIF parser:
// neither may panic, errors wrap ErrEXIF, the orientation stays in 1..8,
// the time taken in years 1..9999, and a payload spliced into a JPEG's
// APP1 segment reads as the payload alone.
func FuzzEXIF(f *testing.F) {
	f.Add(exifPayload(binary.LittleEndian, 6))
	f.Add(exifPayload(binary.BigEndian, 3))
	f.Add([]byte("Exif\x00\x00MM\x00*\x00\x00\x00\x08\xff\xff"))
	f.Add([]byte("Exif\x00\x00"))
	for _, tc := range exifCases {
		if b, err := os.ReadFile(filepath.Join("testdata", tc.file)); err == nil {
			f.Add(b)
			if i := bytes.Index(b, exifHeader); i >= 0 {
				f.Add(b[i:])
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, parse := range []func([]byte) (EXIF, error){ReadJPEGEXIF, ParseEXIF} {
			x, err := parse(data)
			if err != nil && !errors.Is(err, ErrEXIF) {
				t.Fatalf("error %v does not wrap ErrEXIF", err)
			}
			if x.Orientation < 1 || x.Orientation > 8 {
				t.Fatalf("orientation %d", x.Orientation)
			}
			if !x.Taken.IsZero() && (x.Taken.Year() < 1 || x.Taken.Year() > 9999) {
				t.Fatalf("taken %v", x.Taken)
			}
		}
		if bytes.HasPrefix(data, exifHeader) && len(data) <= 0xFFFF-2 {
			px, perr := ParseEXIF(data)
			jx, jerr := ReadJPEGEXIF(withAPP1([]byte{0xFF, 0xD8, 0xFF, 0xD9}, data))
			if px.Orientation != jx.Orientation || !px.Taken.Equal(jx.Taken) || px.Zoned != jx.Zoned || (perr == nil) != (jerr == nil) {
				t.Fatalf("in a JPEG: %+v, %v; alone: %+v, %v", jx, jerr, px, perr)
			}
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
