package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/internal/datadir"
)

// internalName matches what a user should never read in a message: a Go
// package's error prefix ("imaging: …", "eval: …"), a Go type name, or a
// formatting mistake.
var internalName = regexp.MustCompile(`(^|[\s:(])(imaging|eval|nets|pate|dplc|checkpoint|arch|dataset|paillier|cli):\s|\*?(os|fs)\.PathError|\bstrconv\.|%!|\bfloat64\b|\bint\b`)

// TestUserErrors is the new user's pass over the commands' errors (issue
// 13, item 4): each bad input fails with a non-zero status and one line
// that says what is wrong in the user's words, naming the offending flag
// or file once, without Go package prefixes or type names.
func TestUserErrors(t *testing.T) {
	dir := t.TempDir()
	text := writeFile(t, dir, "notes.txt", []byte("hello\n"))
	fakeJPEG := writeFile(t, dir, "text.jpg", []byte("hello\n"))
	hist := writeFile(t, dir, "votes.json", []byte("[[48, 1, 1], [20, 25, 5]]"))
	centres := writeFile(t, dir, "centres.json", []byte("[[0.1, 0.2], [0.3, -0.1]]"))
	folder := filepath.Join(dir, "folder")
	if err := os.Mkdir(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.jpg")
	missingCkpt := filepath.Join(dir, "absent.ckpt")
	ledgers := filepath.Join(dir, "ledgers")
	models := datadir.ModelDirForTest(t)
	good := datadir.ForTest(t, "lfw", "images_deepfunneled", "George_W_Bush", "George_W_Bush_0001.jpg")
	schedule := []string{"--sampling-rate", "0.01", "--noise-multiplier", "1", "--steps", "10"}

	tests := []struct {
		name string
		args []string
		want string
		once string // named exactly once in the message (a path or flag)
	}{
		// Positional arguments.
		{"detect without photos", []string{"detect"}, "veil: detect needs at least one photo", ""},
		{"embed without photos", []string{"embed"}, "veil: embed needs at least one photo", ""},
		{"train with an argument", []string{"train", "extra"}, `veil: train takes no arguments, got "extra"`, "extra"},
		{"pate without a file", []string{"privacy", "pate"}, "veil: privacy pate needs one file of vote histograms", ""},
		{"dplc with two files", []string{"privacy", "dplc", centres, centres}, "veil: privacy dplc needs one file of class centres (or - for standard input), got 2", ""},
		{"epsilon with an argument", append([]string{"privacy", "epsilon", "extra"}, schedule...), "takes no arguments", "extra"},
		{"bench paillier with an argument", []string{"bench", "paillier", "extra"}, "veil: bench paillier takes no arguments", "extra"},
		{"bench dphe with an argument", []string{"bench", "dphe", "extra"}, "veil: bench dphe takes no arguments", "extra"},
		{"bench metric with an argument", []string{"bench", "metric", "extra"}, "veil: bench metric takes no arguments", "extra"},
		{"bench unlink with an argument", []string{"bench", "unlink", "extra"}, "veil: bench unlink takes no arguments", "extra"},

		// Flags that do not parse, or do not exist.
		{"steps not a number", append([]string{"privacy", "epsilon"}, append(schedule, "--steps", "abc")...), `invalid argument "abc" for "--steps" flag: not a whole number (see veil privacy epsilon --help)`, "--steps"},
		{"min-score not a number", []string{"detect", "--min-score", "x", good}, `invalid argument "x" for "--min-score" flag: not a number (see veil detect --help)`, "--min-score"},
		{"dp not a boolean", []string{"train", "--dp=maybe"}, `invalid argument "maybe" for "--dp" flag: not true or false`, "--dp"},
		{"batch out of range", []string{"bench", "train", "--batch", "99999999999999999999"}, `for "--batch" flag: out of range`, "--batch"},
		{"unknown flag", []string{"embed", "--bogus", good}, "unknown flag: --bogus (see veil embed --help)", "--bogus"},

		// The face pipeline's flags.
		{"min-score above 1", []string{"detect", "--min-score", "1.5", good}, "--min-score must be strictly between 0 and 1, got 1.5", "--min-score"},
		{"negative min-score, one detector", []string{"embed", "--detector", "ssd", "--min-score", "-1", good}, "--min-score must be strictly between 0 and 1, got -1", "--min-score"},
		{"max-faces 0", []string{"embed", "--max-faces", "0", good}, "--max-faces must be between 1 and 10000, got 0", "--max-faces"},
		{"bad align", []string{"embed", "--align", "eyes", good}, `--align must be both, faceapi or dlib, got "eyes"`, "--align"},
		{"verify min-score", []string{"verify", "--min-score", "0", good, good}, "--min-score must be strictly between 0 and 1, got 0", "--min-score"},
		{"bench faces min-score", []string{"bench", "faces", "--min-score", "2", good}, "--min-score must be strictly between 0 and 1, got 2", "--min-score"},
		{"bench faces rounds", []string{"bench", "faces", "--rounds", "0", good}, "--rounds must be at least 1, got 0", "--rounds"},
		{"bench faces size", []string{"bench", "faces", "--size", "-1", good}, "--size must be at least 0, got -1", "--size"},

		// Files that are missing, folders, or of the wrong kind.
		{"missing photo", []string{"detect", "--models", models, missing}, "cannot read " + missing + ": no such file or directory", missing},
		{"folder as a photo", []string{"embed", "--models", models, folder}, folder + " is a folder, not an image file", folder},
		{"text as a photo", []string{"detect", "--models", models, fakeJPEG}, "unsupported or corrupt image: not a JPEG or PNG", fakeJPEG},
		{"compare with a text file", []string{"compare", "--models", models, good, fakeJPEG}, "unsupported or corrupt image", fakeJPEG},
		{"compare with a folder", []string{"compare", "--models", models, good, folder}, "is a folder, not an image file", folder},
		{"models folder without models", []string{"detect", "--models", folder, good}, "pretrained model files not installed", ""},
		{"missing pairs file", []string{"verify", "--images", folder, "--pairs", missing}, "cannot read pairs file " + missing, missing},
		{"pairs file is a folder", []string{"verify", "--images", folder, "--pairs", folder}, folder + " is a folder, not a pairs file", ""},
		{"pairs file of text", []string{"verify", "--images", folder, "--pairs", text}, "malformed pairs file", text},
		{"bench detect pairs file of text", []string{"bench", "detect", "--images", folder, "--pairs", text}, "malformed pairs file", text},
		{"head not a checkpoint", []string{"compare", "--head", text, good, good}, "not a Veil checkpoint", text},
		{"head missing", []string{"compare", "--head", missingCkpt, good, good}, "cannot read checkpoint " + missingCkpt, missingCkpt},
		{"votes missing", []string{"privacy", "pate", missing}, "cannot open " + missing + ": no such file or directory", missing},
		{"votes in a folder", []string{"privacy", "pate", folder}, folder + " is a folder; give a file", folder},
		{"votes file of text", []string{"privacy", "pate", text}, "not a file of vote histograms", text},
		{"centres file of text", []string{"privacy", "dplc", "--dataset", "faces", "--ledger-dir", ledgers, text}, "not a file of class centres", text},
		{"train on a folder that is not LFW", []string{"train", "--data", folder}, "--data " + folder + " is not LFW's folder", folder},

		// Impossible numbers.
		{"compare threshold 0", []string{"compare", "--threshold", "0", good, good}, "--threshold must be a positive distance, got 0", "--threshold"},
		{"train batch 0", []string{"train", "--batch", "0"}, "--batch must be at least 1, got 0", "--batch"},
		{"train micro-batch 0", []string{"train", "--micro-batch", "0"}, "--micro-batch must be at least 1, got 0", "--micro-batch"},
		{"train negative lr", []string{"train", "--lr", "-1"}, "--lr must be a positive number, got -1", "--lr"},
		{"train NaN lr", []string{"train", "--lr", "nan"}, "--lr must be a positive number, got NaN", "--lr"},
		{"train width 0", []string{"train", "--width", "0"}, "--width must be in (0, 4], got 0", "--width"},
		{"train momentum 1", []string{"train", "--momentum", "1"}, "--momentum must be in [0, 1), got 1", "--momentum"},
		{"train ema 1", []string{"train", "--ema", "1"}, "--ema must be in [0, 1)", "--ema"},
		{"train input 8", []string{"train", "--input", "8"}, "--input must be between 32 and 1024, got 8", "--input"},
		{"train loss", []string{"train", "--loss", "hinge"}, `--loss must be softmax, cosface, arcface, triplet, irene or distill, got "hinge"`, "--loss"},
		{"train freeze-blocks", []string{"train", "--freeze-blocks", "20"}, "--freeze-blocks must be between 0 and 14, got 20", "--freeze-blocks"},
		{"train δ = 1", []string{"train", "--dp", "--noise-multiplier", "1", "--delta", "1"}, "--delta must be strictly between 0 and 1, got 1", "--delta"},
		{"train clip 0", []string{"train", "--dp", "--noise-multiplier", "1", "--clip", "0"}, "--clip must be a positive number, got 0", "--clip"},
		{"train negative target ε", []string{"train", "--dp", "--target-epsilon", "-1"}, "--target-epsilon must be a positive number, got -1", "--target-epsilon"},
		{"train σ and target ε", []string{"train", "--dp", "--noise-multiplier", "1", "--target-epsilon", "1"}, "give --noise-multiplier or --target-epsilon, not both", ""},
		{"train negative budget", []string{"train", "--dp", "--noise-multiplier", "1", "--budget-epsilon", "-1"}, "--budget-epsilon must be a positive number, got -1", "--budget-epsilon"},
		{"pate γ 0", []string{"privacy", "pate", "--gamma", "0", hist}, "--gamma must be a positive number, got 0", "--gamma"},
		{"pate δ 1", []string{"privacy", "pate", "--delta", "1", hist}, "--delta must be strictly between 0 and 1, got 1", "--delta"},
		{"dplc negative ε", []string{"privacy", "dplc", "--dataset", "faces", "--ledger-dir", ledgers, "--epsilon", "-1", centres}, "--epsilon must be a positive number, got -1", "--epsilon"},
		{"dplc δ 1", []string{"privacy", "dplc", "--dataset", "faces", "--ledger-dir", ledgers, "--delta", "1", centres}, "--delta must be strictly between 0 and 1, got 1", "--delta"},
		{"dplc margin 4", []string{"privacy", "dplc", "--dataset", "faces", "--ledger-dir", ledgers, "--margin", "4", centres}, "--margin must be an angle in radians strictly between 0 and π", "--margin"},
		{"dplc clusters 0", []string{"privacy", "dplc", "--dataset", "faces", "--ledger-dir", ledgers, "--clusters", "0", centres}, "--clusters must be between 1 and 16, got 0", "--clusters"},
		{"pld interval 0", append([]string{"privacy", "epsilon", "--accountant", "pld", "--pld-interval", "0"}, schedule...), "--pld-interval must be a positive number, got 0", "--pld-interval"},
		{"bench train width 0", []string{"bench", "train", "--width", "0"}, "--width must be in (0, 4], got 0", "--width"},
		{"bench train steps 0", []string{"bench", "train", "--steps", "0"}, "--steps must be at least 1, got 0", "--steps"},
		{"bench paillier small key", []string{"bench", "paillier", "--bits", "100"}, "--bits must be at least 2048 (a smaller modulus can be factored), got 100", "--bits"},
		{"bench paillier randomness", []string{"bench", "paillier", "--randomness", "weak"}, `--randomness must be full or short-exponent, got "weak"`, "--randomness"},
		{"bench dphe classes", []string{"bench", "dphe", "--classes", "-1"}, "--classes must be at least 1, got -1", "--classes"},
		{"bench dphe small key", []string{"bench", "dphe", "--bits", "10"}, "--bits must be at least 2048", "--bits"},
		{"bench metric mistyped second split", []string{"bench", "metric", "--data", missing, "--splits", "train,tset"}, `--splits must be train or test, got "tset"`, "--splits"},
		{"bench metric negative workers", []string{"bench", "metric", "--data", missing, "--workers", "-1"}, "--workers must be at least 0, got -1", "--workers"},
		{"bench unlink unknown metric", []string{"bench", "unlink", "--data", missing, "--metrics", "lmnn,pca"}, `--metrics must be identity, rotation or lmnn, got "pca"`, "--metrics"},
		{"bench unlink negative workers", []string{"bench", "unlink", "--data", missing, "--workers", "-1"}, "--workers must be at least 0, got -1", "--workers"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := run(t, tc.args...)
			if code == 0 {
				t.Fatalf("exit 0 (stdout %.200q), want failure", stdout)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q, want it to say %q", stderr, tc.want)
			}
			// The message is the first line (detect and embed add a count
			// of failed images after it).
			msg, _, _ := strings.Cut(stderr, "\n")
			if !strings.HasPrefix(msg, "veil: ") {
				t.Errorf("message %q does not start with \"veil: \"", msg)
			}
			if tc.once != "" && strings.Count(msg, tc.once) != 1 {
				t.Errorf("message names %q %d times: %q", tc.once, strings.Count(msg, tc.once), msg)
			}
			if m := internalName.FindString(msg); m != "" {
				t.Errorf("message shows an internal name %q: %q", m, msg)
			}
			if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
				t.Fatalf("panic: %s", stderr)
			}
		})
	}
}
