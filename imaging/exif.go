package imaging

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
)

// EXIF is what is read from a photo's EXIF block: when it was taken and
// how it is oriented. Decode applies the orientation; package tagging
// records the time taken.
type EXIF struct {
	// Taken is DateTimeOriginal (tag 0x9003 of the Exif IFD), else
	// DateTimeDigitized (0x9004), with SubSecTimeOriginal's fraction; the
	// zero time when neither is present or valid. DateTime (0x0132 of
	// IFD0) is deliberately not used: editors rewrite it on every save,
	// so it says when the file changed, not when the photo was taken.
	Taken time.Time
	// Zoned reports whether Taken's zone came from OffsetTimeOriginal
	// (0x9011). Without it EXIF times are the camera's wall-clock time in
	// an unknown zone, and Taken is expressed in UTC only as a carrier.
	Zoned bool
	// Orientation is IFD0's Orientation (0x0112), 1..8; 1 when absent.
	Orientation int
}

// TakenString formats Taken as stored by package tagging's photos table:
// "2006-01-02T15:04:05" with the fraction of a second when known and the
// zone offset when Zoned, or "" when Taken is unknown. Without a zone the
// time is the camera's local wall-clock time, so no offset is written
// rather than a misleading "Z".
func (x EXIF) TakenString() string {
	if x.Taken.IsZero() {
		return ""
	}
	layout := "2006-01-02T15:04:05.999999999"
	if x.Zoned {
		layout += "Z07:00"
	}
	return x.Taken.Format(layout)
}

// ErrEXIF is wrapped by every error about a malformed EXIF block.
var ErrEXIF = errors.New("malformed EXIF")

// EXIF tags read by ParseEXIF.
const (
	tagOrientation        = 0x0112
	tagExifIFD            = 0x8769
	tagDateTimeOriginal   = 0x9003
	tagDateTimeDigitized  = 0x9004
	tagOffsetTimeOriginal = 0x9011
	tagSubSecTimeOriginal = 0x9291
)

// maxIFDEntries bounds the entries of one IFD. Real cameras write a few
// dozen; a count in the thousands is a corrupt or hostile block.
const maxIFDEntries = 1024

var exifHeader = []byte("Exif\x00\x00")

// ReadJPEGEXIF finds the first APP1 Exif segment among the marker segments
// of a JPEG before its first scan and parses it with ParseEXIF. A file
// that is not a JPEG, or a JPEG without EXIF, gives the zero EXIF with
// orientation 1 and no error; a malformed EXIF block gives an error
// wrapping ErrEXIF, with what ParseEXIF could read (the photo is still
// usable: Decode applies that orientation and ignores the error, as
// browsers do). data is untrusted: every length is checked against the
// buffer.
func ReadJPEGEXIF(data []byte) (EXIF, error) {
	none := EXIF{Orientation: 1}
	if len(data) < 4 || data[0] != 0xFF || data[1] != 0xD8 {
		return none, nil
	}
	pos := 2
	for pos+4 <= len(data) {
		if data[pos] != 0xFF {
			return none, fmt.Errorf("%w: JPEG marker expected at byte %d", ErrEXIF, pos)
		}
		marker := data[pos+1]
		switch {
		case marker == 0xFF: // fill byte
			pos++
			continue
		case marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8): // standalone markers
			pos += 2
			continue
		case marker == 0xDA || marker == 0xD9: // start of scan, end of image
			return none, nil
		}
		n := int(binary.BigEndian.Uint16(data[pos+2:]))
		if n < 2 || pos+2+n > len(data) {
			return none, fmt.Errorf("%w: JPEG segment 0x%02X at byte %d claims %d bytes, past the end of the file", ErrEXIF, marker, pos, n)
		}
		if payload := data[pos+4 : pos+2+n]; marker == 0xE1 && bytes.HasPrefix(payload, exifHeader) {
			return ParseEXIF(payload)
		}
		pos += 2 + n
	}
	return none, nil
}

// ParseEXIF parses the payload of a JPEG APP1 Exif segment (the bytes after
// the segment length, starting with "Exif\0\0"): IFD0's Orientation and,
// through IFD0's Exif IFD pointer, the time the photo was taken. Only those
// two IFDs are read and no pointer is followed twice, so a block whose
// offsets loop cannot make it loop. Tags that are malformed are ignored
// when the rest can be read (an orientation outside 1..8 counts as 1, an
// invalid date as unknown), as browsers and photo managers do; a block
// whose structure cannot be read is an error wrapping ErrEXIF.
//
// The orientation is read as browsers read it: from the first Orientation
// entry among those of IFD0 that lie inside the block, even when IFD0
// claims more entries than the block holds (an error, after which the
// time taken is not looked for). The time taken is read only from a whole
// Exif IFD.
func ParseEXIF(payload []byte) (EXIF, error) {
	x := EXIF{Orientation: 1}
	if !bytes.HasPrefix(payload, exifHeader) {
		return x, fmt.Errorf("%w: no \"Exif\\0\\0\" header", ErrEXIF)
	}
	t := tiff{b: payload[len(exifHeader):]}
	if len(t.b) < 8 {
		return x, fmt.Errorf("%w: TIFF header truncated (%d bytes)", ErrEXIF, len(t.b))
	}
	switch string(t.b[:2]) {
	case "II":
		t.bo = binary.LittleEndian
	case "MM":
		t.bo = binary.BigEndian
	default:
		return x, fmt.Errorf("%w: bad TIFF byte-order mark %q", ErrEXIF, t.b[:2])
	}
	if m := t.bo.Uint16(t.b[2:]); m != 42 {
		return x, fmt.Errorf("%w: bad TIFF magic number %d", ErrEXIF, m)
	}
	var exifOff uint32
	haveExif, haveOrientation := false, false
	err := t.ifd(t.bo.Uint32(t.b[4:]), "IFD0", func(e entry) {
		switch {
		case e.tag == tagOrientation && !haveOrientation:
			// The first tag counts.
			haveOrientation = true
			if v, ok := t.short(e); ok && v >= 1 && v <= 8 {
				x.Orientation = int(v)
			}
		case e.tag == tagExifIFD && !haveExif:
			if v, ok := t.long(e); ok {
				exifOff, haveExif = v, true
			}
		}
	})
	if err != nil || !haveExif {
		return x, err
	}
	var original, digitized, offset, subsec string
	err = t.ifd(exifOff, "Exif IFD", func(e entry) {
		switch e.tag {
		case tagDateTimeOriginal:
			original = t.ascii(e)
		case tagDateTimeDigitized:
			digitized = t.ascii(e)
		case tagOffsetTimeOriginal:
			offset = t.ascii(e)
		case tagSubSecTimeOriginal:
			subsec = t.ascii(e)
		}
	})
	if err != nil {
		return x, err
	}
	if tm, ok := parseEXIFTime(original); ok {
		x.Taken = tm
		if frac, ok := parseSubSec(subsec); ok {
			x.Taken = x.Taken.Add(frac)
		}
		if loc, ok := parseEXIFOffset(offset); ok {
			x.Taken = time.Date(x.Taken.Year(), x.Taken.Month(), x.Taken.Day(), x.Taken.Hour(), x.Taken.Minute(), x.Taken.Second(), x.Taken.Nanosecond(), loc)
			x.Zoned = true
		}
	} else if tm, ok := parseEXIFTime(digitized); ok {
		x.Taken = tm
	}
	return x, nil
}

// tiff reads the TIFF structure inside an EXIF block.
type tiff struct {
	b  []byte
	bo binary.ByteOrder
}

// entry is one 12-byte IFD entry.
type entry struct {
	tag, typ uint16
	count    uint32
	value    [4]byte // the value itself when it fits, else its offset
}

// ifd calls each, in order, with the entries of the IFD at off that lie
// inside the block, and then reports an error when the IFD claims more
// entries than the block holds or than maxIFDEntries. An offset outside
// the block is an error before any entry. name says which IFD in errors.
func (t tiff) ifd(off uint32, name string, each func(entry)) error {
	o := uint64(off)
	if o < 8 || o+2 > uint64(len(t.b)) {
		return fmt.Errorf("%w: %s offset %d outside the %d-byte block", ErrEXIF, name, off, len(t.b))
	}
	n := uint64(t.bo.Uint16(t.b[o:]))
	for i := uint64(0); i < n && o+2+12*(i+1) <= uint64(len(t.b)); i++ {
		p := t.b[o+2+12*i:]
		e := entry{tag: t.bo.Uint16(p), typ: t.bo.Uint16(p[2:]), count: t.bo.Uint32(p[4:])}
		copy(e.value[:], p[8:12])
		each(e)
	}
	if n > maxIFDEntries {
		return fmt.Errorf("%w: %s claims %d entries (at most %d read)", ErrEXIF, name, n, maxIFDEntries)
	}
	if o+2+12*n > uint64(len(t.b)) {
		return fmt.Errorf("%w: %s's %d entries run past the end of the %d-byte block", ErrEXIF, name, n, len(t.b))
	}
	return nil
}

// TIFF field types used here.
const (
	typeASCII = 2
	typeShort = 3
	typeLong  = 4
	typeIFD   = 13
)

// short returns the first value of a SHORT or LONG entry (LONG tolerated
// for the orientation, as browsers do).
func (t tiff) short(e entry) (uint32, bool) {
	switch {
	case e.typ == typeShort && e.count >= 1:
		return uint32(t.bo.Uint16(e.value[:])), true
	case e.typ == typeLong && e.count >= 1:
		return t.bo.Uint32(e.value[:]), true
	}
	return 0, false
}

// long returns a LONG×1 or IFD×1 value.
func (t tiff) long(e entry) (uint32, bool) {
	if (e.typ == typeLong || e.typ == typeIFD) && e.count == 1 {
		return t.bo.Uint32(e.value[:]), true
	}
	return 0, false
}

// maxASCII bounds the ASCII values read: the dates and offsets wanted are
// at most a few dozen bytes.
const maxASCII = 64

// ascii returns an ASCII value without its terminating NULs and trailing
// spaces, or "" when it is not ASCII, too long, or outside the block.
func (t tiff) ascii(e entry) string {
	if e.typ != typeASCII || e.count == 0 || e.count > maxASCII {
		return ""
	}
	var raw []byte
	if e.count <= 4 {
		raw = e.value[:e.count]
	} else {
		off := uint64(t.bo.Uint32(e.value[:]))
		if off+uint64(e.count) > uint64(len(t.b)) {
			return ""
		}
		raw = t.b[off : off+uint64(e.count)]
	}
	if i := bytes.IndexByte(raw, 0); i >= 0 {
		raw = raw[:i]
	}
	for _, c := range raw {
		if c < 0x20 || c > 0x7E {
			return ""
		}
	}
	return strings.TrimRight(string(raw), " ")
}

// parseEXIFTime parses "YYYY:MM:DD HH:MM:SS". Blank or zero dates, which
// cameras write when their clock is unset, are not times.
func parseEXIFTime(s string) (time.Time, bool) {
	if len(s) != 19 {
		return time.Time{}, false
	}
	tm, err := time.Parse("2006:01:02 15:04:05", s)
	if err != nil || tm.Year() < 1 {
		return time.Time{}, false
	}
	return tm, true
}

// parseSubSec parses SubSecTimeOriginal's decimal digits (the fraction's
// digits after the point: "5" is 0.5 s, "05" is 0.05 s).
func parseSubSec(s string) (time.Duration, bool) {
	if s == "" || len(s) > 9 {
		return 0, false
	}
	var ns int64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		ns = 10*ns + int64(c-'0')
	}
	for i := len(s); i < 9; i++ {
		ns *= 10
	}
	return time.Duration(ns), true
}

// parseEXIFOffset parses OffsetTimeOriginal, "+HH:MM" or "-HH:MM".
func parseEXIFOffset(s string) (*time.Location, bool) {
	if len(s) != 6 || (s[0] != '+' && s[0] != '-') || s[3] != ':' {
		return nil, false
	}
	tm, err := time.Parse("-07:00", s)
	if err != nil {
		return nil, false
	}
	_, off := tm.Zone()
	if off < -14*3600 || off > 14*3600 {
		return nil, false
	}
	return time.FixedZone("", off), true
}
