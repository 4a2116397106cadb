package imaging

import (
	"bytes"
	"strings"
	"testing"
)

func TestFormatOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		want Format
		err  string
	}{
		{"out.png", PNG, ""},
		{"dir.x/OUT.PNG", PNG, ""},
		{"one.jpg", JPEG, ""},
		{"one.JPEG", JPEG, ""},
		{"one.gif", "", "cannot write .gif images"},
		{"one", "", "no extension"},
		{"dir.png/one", "", "no extension"},
	} {
		got, err := FormatOf(tc.name)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("FormatOf(%q) = %q, %v; want %q, error with %q", tc.name, got, err, tc.want, tc.err)
		}
	}
}

// TestEncodeWritesTheFormat: each format's bytes decode as that format
// (a .jpg drawing used to hold PNG bytes).
func TestEncodeWritesTheFormat(t *testing.T) {
	m := NewRGB(16, 8)
	for i := range m.Pix {
		m.Pix[i] = uint8(i * 7)
	}
	for _, f := range []Format{PNG, JPEG} {
		var b bytes.Buffer
		if err := m.Encode(&b, f); err != nil {
			t.Fatal(err)
		}
		got, info, err := Decode(b.Bytes(), DefaultLimits())
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if sniff(b.Bytes()) != string(f) || info.Format != string(f) || got.W != 16 || got.H != 8 {
			t.Errorf("%s: wrote %q (%s, %dx%d)", f, sniff(b.Bytes()), info.Format, got.W, got.H)
		}
	}
	if err := m.Encode(&bytes.Buffer{}, "gif"); err == nil {
		t.Error("gif encoded")
	}
	if err := NewRGB(0, 3).Encode(&bytes.Buffer{}, JPEG); err == nil {
		t.Error("empty image encoded as JPEG")
	}
}
