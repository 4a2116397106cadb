package tfjs

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/internal/datadir"
)

type inventoryEntry struct {
	Name      string `json:"name"`
	Shape     []int  `json:"shape"`
	DType     string `json:"dtype"`
	Offset    int    `json:"offset"`
	NBytes    int    `json:"nbytes"`
	SHA256    string `json:"sha256"`
	DeqSHA256 string `json:"deq_sha256"`
}

// TestAgainstInventory loads every model and checks each tensor's shape and
// the sha256 of its dequantized little-endian float32 bytes against the
// reference inventory computed with TF.js.
func TestAgainstInventory(t *testing.T) {
	inv := datadir.ForTest(t, "faceapi-reference", "weights_inventory")
	files, err := filepath.Glob(filepath.Join(inv, "*.json"))
	if err != nil || len(files) != 7 {
		t.Fatalf("want 7 inventory files, got %d (%v)", len(files), err)
	}
	dir := datadir.ModelDirForTest(t)
	for _, f := range files {
		model := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(model, func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var want []inventoryEntry
			if err := json.Unmarshal(raw, &want); err != nil {
				t.Fatal(err)
			}
			w, err := Load(filepath.Join(dir, model+"-weights_manifest.json"))
			if err != nil {
				t.Fatal(err)
			}
			if len(w.Order) != len(want) {
				t.Fatalf("%d tensors, inventory has %d", len(w.Order), len(want))
			}
			for i, e := range want {
				if w.Order[i] != e.Name {
					t.Fatalf("tensor %d is %q, want %q", i, w.Order[i], e.Name)
				}
				got, err := w.Get(e.Name, e.Shape...)
				if err != nil {
					t.Fatal(err)
				}
				var buf bytes.Buffer
				if got.DType == Int32 {
					binary.Write(&buf, binary.LittleEndian, got.I32)
				} else {
					binary.Write(&buf, binary.LittleEndian, got.F32)
				}
				sum := sha256.Sum256(buf.Bytes())
				if h := hex.EncodeToString(sum[:]); h != e.DeqSHA256 {
					t.Errorf("%s: dequantized sha256 %s, want %s", e.Name, h, e.DeqSHA256)
				}
			}
		})
	}
}

func TestDequantization(t *testing.T) {
	m := `[{"paths":["w.bin"],"weights":[
	  {"name":"q8","shape":[3],"dtype":"float32","quantization":{"dtype":"uint8","scale":0.5,"min":-1}},
	  {"name":"q16","shape":[2],"dtype":"float32","quantization":{"dtype":"uint16","scale":0.25,"min":1}},
	  {"name":"f","shape":[1],"dtype":"float32"},
	  {"name":"i","shape":[2],"dtype":"int32","quantization":{"dtype":"uint8","scale":0.4,"min":0}}]}]`
	groups, err := ParseManifest([]byte(m))
	if err != nil {
		t.Fatal(err)
	}
	var data []byte
	data = append(data, 0, 2, 255)                   // q8
	data = binary.LittleEndian.AppendUint16(data, 4) // q16
	data = binary.LittleEndian.AppendUint16(data, 65535)
	data = binary.LittleEndian.AppendUint32(data, math.Float32bits(-2.5))
	data = append(data, 3, 4) // i: 1.2 -> 1, 1.6 -> 2
	w, err := Decode(groups, [][]byte{data})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		want []float32
	}{
		{"q8", []float32{-1, 0, 126.5}},
		{"q16", []float32{2, 16384.75}},
		{"f", []float32{-2.5}},
	}
	for _, tc := range tests {
		got, _ := w.Get(tc.name)
		for i := range tc.want {
			if got.F32[i] != tc.want[i] {
				t.Errorf("%s[%d] = %v, want %v", tc.name, i, got.F32[i], tc.want[i])
			}
		}
	}
	if i := w.Tensors["i"].I32; i[0] != 1 || i[1] != 2 {
		t.Errorf("int32 rounding: got %v, want [1 2]", i)
	}
}

func TestErrorsNameFileAndTensor(t *testing.T) {
	dir := datadir.ModelDirForTest(t)
	tmp := t.TempDir()
	manifest, err := os.ReadFile(filepath.Join(dir, "tiny_face_detector_model-weights_manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(filepath.Join(dir, "tiny_face_detector_model.bin"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mpath := write("tiny_face_detector_model-weights_manifest.json", manifest)
	tests := []struct {
		name     string
		manifest []byte
		bin      []byte
		want     []string
	}{
		{"truncated shard", manifest, bin[:len(bin)-10], []string{"truncated", "conv8/bias", mpath}},
		{"extra bytes", manifest, append(append([]byte{}, bin...), 1, 2, 3), []string{"3 bytes follow", mpath}},
		{"corrupt manifest", manifest[:40], bin, []string{"not a JSON array", mpath}},
		{"empty manifest", []byte("[]"), bin, []string{"no weight groups"}},
		{"bad dtype", bytes.Replace(manifest, []byte(`"float32"`), []byte(`"complex64"`), 1), bin, []string{"unsupported dtype", "conv0/filters"}},
		{"negative dim", bytes.Replace(manifest, []byte(`[3,3,3,16]`), []byte(`[3,-3,3,16]`), 1), bin, []string{"negative dimension", "conv0/filters"}},
		{"huge tensor", bytes.Replace(manifest, []byte(`[3,3,3,16]`), []byte(`[300000,300000,3,16]`), 1), bin, []string{"exceeds", "conv0/filters"}},
		{"path escape", bytes.Replace(manifest, []byte(`tiny_face_detector_model.bin`), []byte(`../x.bin`), 1), bin, []string{"plain file name"}},
		{"missing shard", bytes.Replace(manifest, []byte(`tiny_face_detector_model.bin`), []byte(`nothere.bin`), 1), bin, []string{"nothere.bin"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			write("tiny_face_detector_model-weights_manifest.json", tc.manifest)
			write("tiny_face_detector_model.bin", tc.bin)
			_, err := Load(mpath)
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
	_, err = Load(filepath.Join(tmp, "absent-weights_manifest.json"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing manifest: got %v, want ErrNotExist", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`[{"paths":["a.bin"],"weights":[{"name":"x","shape":[2],"dtype":"float32","quantization":{"dtype":"uint8","scale":1,"min":0}}]}]`), []byte{1, 2})
	f.Add([]byte(`[{"paths":["a.bin"],"weights":[{"name":"x","shape":[1],"dtype":"int32"}]}]`), []byte{1, 2, 3, 4})
	f.Add([]byte(`[{"paths":["a.bin"],"weights":[{"name":"x","shape":[1000000000,1000],"dtype":"float32"}]}]`), []byte{})
	f.Fuzz(func(t *testing.T, manifest, shard []byte) {
		groups, err := ParseManifest(manifest)
		if err != nil {
			return
		}
		shards := make([][]byte, len(groups))
		if len(shards) > 0 {
			shards[0] = shard
		}
		w, err := Decode(groups, shards)
		if err != nil {
			return
		}
		for _, name := range w.Order {
			tt := w.Tensors[name]
			if len(tt.F32)+len(tt.I32) != tt.Size() {
				t.Fatalf("tensor %q has %d values for shape %v", name, len(tt.F32)+len(tt.I32), tt.Shape)
			}
		}
	})
}
