package tagging

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"image"
	"image/color"
	"image/jpeg"
	"os"
	"path/filepath"
	"testing"

	"github.com/veil-privacy/veil/imaging"
)

var updateTestdata = flag.Bool("update-index-testdata", false, "rewrite tagging/testdata/index-exif-*.jpg")

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

// tinyJPEG encodes a w×h gradient.
func tinyJPEG(t testing.TB, w, h int) []byte {
	t.Helper()
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			m.Set(x, y, color.RGBA{uint8(255 * x / w), uint8(255 * y / h), 128, 255})
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, m, &jpeg.Options{Quality: 50}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// withAPP1 splices an APP1 segment right after the SOI marker.
func withAPP1(jpg, payload []byte) []byte {
	out := append([]byte{}, jpg[:2]...)
	out = append(out, 0xFF, 0xE1, byte((len(payload)+2)>>8), byte(len(payload)+2))
	out = append(out, payload...)
	return append(out, jpg[2:]...)
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
	{"index-exif-le-full.jpg", func(t testing.TB) []byte {
		le := binary.LittleEndian
		return withAPP1(tinyJPEG(t, 12, 8), buildEXIF(le,
			[]tiffEntry{asciiEntry(0x010F, "Veil"), shortEntry(le, tagOrientation, 6), asciiEntry(0x0132, "2024:01:01 00:00:00")},
			[]tiffEntry{asciiEntry(tagDateTimeOriginal, "2019:07:14 16:05:09"), asciiEntry(tagOffsetTimeOriginal, "+02:00"), asciiEntry(tagSubSecTimeOriginal, "25")}, 0))
	}, "2019-07-14T16:05:09.25+02:00", 6, 8, 12, false},
	{"index-exif-be-original.jpg", func(t testing.TB) []byte {
		be := binary.BigEndian
		return withAPP1(tinyJPEG(t, 12, 8), buildEXIF(be,
			[]tiffEntry{shortEntry(be, tagOrientation, 1)},
			[]tiffEntry{asciiEntry(tagDateTimeDigitized, "2016:08:13 09:00:00"), asciiEntry(tagDateTimeOriginal, "2016:08:13 01:11:41")}, 0))
	}, "2016-08-13T01:11:41", 1, 12, 8, false},
	{"index-exif-digitized-only.jpg", func(t testing.TB) []byte {
		be := binary.BigEndian
		return withAPP1(tinyJPEG(t, 12, 8), buildEXIF(be, nil,
			[]tiffEntry{asciiEntry(tagDateTimeDigitized, "2005:02:28 23:59:59")}, 0))
	}, "2005-02-28T23:59:59", 1, 12, 8, false},
	{"index-exif-unset-clock.jpg", func(t testing.TB) []byte {
		le := binary.LittleEndian
		return withAPP1(tinyJPEG(t, 12, 8), buildEXIF(le,
			[]tiffEntry{shortEntry(le, tagOrientation, 3)},
			[]tiffEntry{asciiEntry(tagDateTimeOriginal, "0000:00:00 00:00:00"), asciiEntry(tagDateTimeDigitized, "    :  :     :  :  ")}, 0))
	}, "", 3, 12, 8, false},
	{"index-exif-orientation-only.jpg", func(t testing.TB) []byte {
		le := binary.LittleEndian
		return withAPP1(tinyJPEG(t, 12, 8), buildEXIF(le, []tiffEntry{shortEntry(le, tagOrientation, 8)}, nil, 0))
	}, "", 8, 8, 12, false},
	{"index-exif-none.jpg", func(t testing.TB) []byte { return tinyJPEG(t, 12, 8) }, "", 1, 12, 8, false},
	{"index-exif-loop.jpg", func(t testing.TB) []byte {
		// The Exif IFD pointer points back at IFD0: read once, no loop.
		le := binary.LittleEndian
		return withAPP1(tinyJPEG(t, 12, 8), buildEXIF(le, []tiffEntry{shortEntry(le, tagOrientation, 2)}, []tiffEntry{}, 8))
	}, "", 2, 12, 8, false},
	{"index-exif-bad-subifd.jpg", func(t testing.TB) []byte {
		le := binary.LittleEndian
		return withAPP1(tinyJPEG(t, 12, 8), buildEXIF(le, []tiffEntry{shortEntry(le, tagOrientation, 6)}, []tiffEntry{}, 0xFFFFFF00))
	}, "", 6, 8, 12, true},
	{"index-exif-date-past-end.jpg", func(t testing.TB) []byte {
		// DateTimeOriginal's offset points past the block: ignored.
		be := binary.BigEndian
		p := buildEXIF(be, nil, []tiffEntry{asciiEntry(tagDateTimeOriginal, "2019:07:14 16:05:09")}, 0)
		return withAPP1(tinyJPEG(t, 12, 8), p[:len(p)-10])
	}, "", 1, 12, 8, false},
}

// TestWriteEXIFTestdata rewrites the fixtures with -update-index-testdata
// and otherwise checks that they are what the builders make, so the files
// and their descriptions cannot drift apart.
func TestWriteEXIFTestdata(t *testing.T) {
	for _, tc := range exifCases {
		path := filepath.Join("testdata", tc.file)
		b := tc.build(t)
		if *updateTestdata {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./tagging -run TestWriteEXIFTestdata -update-index-testdata)", err)
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
			m, info, err := imaging.Decode(data, imaging.DefaultLimits())
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
	dir := filepath.Join("..", "..", "shared", "data", "faceapi-reference", "images")
	want := map[string]string{
		"sample1.jpg": "2017-10-31T20:16:18", // DateTime is 2017:11:01 12:51:52
		"sample2.jpg": "2016-08-13T01:11:41",
		"sample6.jpg": "2018-05-05T19:42:10",
	}
	for name, taken := range want {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			t.Skipf("shared data not present: %v", err)
		}
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

func TestParseEXIFStructureErrors(t *testing.T) {
	le := binary.LittleEndian
	good := buildEXIF(le, []tiffEntry{shortEntry(le, tagOrientation, 6)}, []tiffEntry{asciiEntry(tagDateTimeOriginal, "2019:07:14 16:05:09")}, 0)
	set16 := func(at int, v uint16) []byte { p := bytes.Clone(good); le.PutUint16(p[at:], v); return p }
	set32 := func(at int, v uint32) []byte { p := bytes.Clone(good); le.PutUint32(p[at:], v); return p }
	tests := []struct {
		name    string
		payload []byte
	}{
		{"empty", nil},
		{"no-header", good[6:]},
		{"header-only", good[:6]},
		{"tiff-truncated", good[:12]},
		{"bad-order", append([]byte("Exif\x00\x00XX"), good[8:]...)},
		{"bad-magic", set16(8, 43)},
		{"ifd0-offset-past-end", set32(10, 0xFFFFFFF0)},
		{"ifd0-offset-inside-header", set32(10, 4)},
		{"ifd0-too-many-entries", set16(14, maxIFDEntries+1)},
		{"ifd0-entries-past-end", set16(14, 200)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x, err := ParseEXIF(tc.payload)
			if !errors.Is(err, ErrEXIF) {
				t.Fatalf("error %v, want one wrapping ErrEXIF", err)
			}
			if x.Orientation != 1 || !x.Taken.IsZero() {
				t.Errorf("a refused block gave %+v", x)
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

// FuzzEXIF feeds arbitrary bytes to the JPEG walker and the EXIF parser:
// neither may panic, errors wrap ErrEXIF, the orientation stays in 1..8
// and agrees with the one package imaging's decoder reads.
func FuzzEXIF(f *testing.F) {
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
		if x, err := ParseEXIF(data); err == nil {
			if o, err := imaging.ParseExifOrientation(data); err == nil && o != x.Orientation {
				t.Fatalf("orientation %d, the decoder reads %d", x.Orientation, o)
			}
		}
	})
}
