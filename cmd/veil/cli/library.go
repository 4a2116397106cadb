package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/veil-privacy/veil/internal/progress"
	"github.com/veil-privacy/veil/tagging"
)

// Environment variables of the library commands.
const (
	envLibrary       = "VEIL_LIBRARY"
	envPassphrase    = "VEIL_PASSPHRASE"
	envNewPassphrase = "VEIL_NEW_PASSPHRASE"
	// envTestSettings, set to 1, lets init and rekey accept a passphrase
	// under 10 characters and Argon2id costs under the minimum: for tests
	// and demos only.
	envTestSettings = "VEIL_TEST_SETTINGS"
)

// libraryCommands lists the constructors of the `veil library` subcommands.
// Add a line here when adding one (in its own file).
var libraryCommands = []func(*env) *cobra.Command{
	newLibraryInitCmd,
	newLibraryRekeyCmd,
	newLibraryAddCmd,
	newLibraryStatusCmd,
	newLibraryLearnCmd,
	newLibraryModelCmd,
	newLibraryJoinCmd,
	newLibraryLeaveCmd,
}

func newLibraryCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "library",
		Short: "Create and manage an encrypted photo library for face tagging",
		Long: `A library is a folder (--library DIR, or $VEIL_LIBRARY) holding library.db: the
photos' paths and sizes, the faces found in them, the people you name and
everything learned from your names. Photos stay where they are.

Everything that identifies a person (face descriptors, landmarks and thumbnails,
names, the photos' content hashes, the learned metric) is encrypted with a key
that only your passphrase unlocks (Argon2id, then XChaCha20-Poly1305, each field
bound to its row). Photos are recognised by a keyed hash, so nobody without the
passphrase can tell whether a given photo is in the library. What stays readable
(paths, boxes, which face is whose) is authenticated: a library edited outside
veil is refused. The
passphrase comes from --key-file FILE, else $VEIL_PASSPHRASE, else a prompt on
the terminal. A key file (mode 0600) or the prompt is safer than the variable,
which other programs of yours can read. There is no way to recover a library
whose passphrase is lost.

` + exitStatusHelp,
		Example: `  export VEIL_LIBRARY=~/Pictures/veil
  veil library init                      # asks for a new passphrase twice
  veil library add ~/Pictures            # find and describe the faces
  veil faces clusters                    # unnamed faces grouped by likeness
  veil faces name 12 15 31 --person "Ada Lovelace"
  veil suggest                           # who the other faces may be
  veil faces reject 40 --person "Ada Lovelace"
  veil people list`,
	}
	return addSubcommands(e, cmd, libraryCommands)
}

// libraryFlags are the flags of every command that opens a library.
type libraryFlags struct {
	dir     string
	keyFile string
}

// register adds --library and --key-file.
func (f *libraryFlags) register(cmd *cobra.Command) {
	// The environment is read when the command runs, not as the flag's
	// default, so --help shows the default once, as $VEIL_LIBRARY.
	cmd.Flags().StringVar(&f.dir, "library", "", "the library folder (default $"+envLibrary+")")
	cmd.Flags().StringVar(&f.keyFile, "key-file", "", "read the passphrase from this file (mode 0600; default $"+envPassphrase+", else a prompt)")
}

// folder returns the library folder or a clear error when none was given.
func (f *libraryFlags) folder() (string, error) {
	if f.dir == "" {
		f.dir = os.Getenv(envLibrary)
	}
	if f.dir == "" {
		return "", errors.New("no library: pass --library DIR or set " + envLibrary)
	}
	return f.dir, nil
}

// passphrase reads the passphrase from --key-file, $VEIL_PASSPHRASE or the
// terminal (confirm asks twice, for a new passphrase).
func (f *libraryFlags) passphrase(e *env, confirm bool) ([]byte, error) {
	return readPassphrase(e, passphraseSource{keyFile: f.keyFile, keyFlag: "--key-file", envVar: envPassphrase}, confirm)
}

// open unlocks the library the flags name.
func (f *libraryFlags) open(e *env) (*tagging.Library, error) {
	dir, err := f.folder()
	if err != nil {
		return nil, err
	}
	pass, err := f.passphrase(e, false)
	if err != nil {
		return nil, err
	}
	defer clear(pass)
	l, err := tagging.Open(dir, pass)
	return l, wrongPassphraseExit(err)
}

// exitWrongPassphrase is the exit status of a library command refused
// because the passphrase does not unlock the library. It differs from 1
// (bad input, an unknown face or person, a damaged library) so that a
// script or a front end can tell "ask again" from "give up", as cryptsetup
// does with its status 2 for a bad passphrase.
const exitWrongPassphrase = 2

// exitStatusHelp is the exit-status paragraph every library command shares.
const exitStatusHelp = `Every command that opens a library exits with status 2 when the passphrase is
wrong (nothing is changed then), 1 on other errors, 0 on success.`

// wrongPassphraseExit gives a wrong passphrase its own exit status.
func wrongPassphraseExit(err error) error {
	if errors.Is(err, tagging.ErrWrongPassphrase) {
		return &exitError{code: exitWrongPassphrase, err: err}
	}
	return err
}

// terminal is where a passphrase is asked when neither a key file nor the
// environment gives one. It is an interface so that tests can drive the
// choice of source without a terminal (cmd/veil's tests check the real one
// does not echo).
type terminal interface {
	// IsTerminal reports whether there is a terminal to ask on.
	IsTerminal() bool
	// ReadPassword reads a line without echoing it.
	ReadPassword() ([]byte, error)
}

// fileTerminal is the terminal of an open file (none if it is not one).
type fileTerminal struct{ f *os.File }

func (t fileTerminal) IsTerminal() bool { return t.f != nil && term.IsTerminal(int(t.f.Fd())) }

func (t fileTerminal) ReadPassword() ([]byte, error) { return term.ReadPassword(int(t.f.Fd())) }

// passphraseSource says where a passphrase comes from: keyFile (given by
// the flag keyFlag) if set, else the environment variable envVar, else a
// no-echo prompt on tty. what names the passphrase in prompts and
// messages ("passphrase" when empty).
type passphraseSource struct {
	keyFile   string
	keyFlag   string
	envVar    string
	what      string
	lookupEnv func(string) (string, bool)
	tty       terminal
	prompts   io.Writer // where the prompt is written (stderr)
}

// readPassphrase reads the passphrase src names, asking on the terminal of
// e's standard input if it comes to that.
func readPassphrase(e *env, src passphraseSource, confirm bool) ([]byte, error) {
	in, _ := e.stdin.(*os.File)
	src.lookupEnv, src.tty, src.prompts = os.LookupEnv, fileTerminal{in}, e.stderr
	return src.read(confirm)
}

// read returns the passphrase; confirm asks twice on the terminal (for a
// new passphrase) and refuses two different answers.
func (s passphraseSource) read(confirm bool) ([]byte, error) {
	what := s.what
	if what == "" {
		what = "passphrase"
	}
	if s.keyFile != "" {
		return tagging.ReadKeyFile(s.keyFile)
	}
	if v, ok := s.lookupEnv(s.envVar); ok {
		if v == "" {
			return nil, fmt.Errorf("%s is set but empty", s.envVar)
		}
		return []byte(v), nil
	}
	if !s.tty.IsTerminal() {
		return nil, fmt.Errorf("no %s: set %s, pass %s FILE, or run in a terminal to be asked", what, s.envVar, s.keyFlag)
	}
	ask := func(p string) ([]byte, error) {
		fmt.Fprintf(s.prompts, "%s: ", p)
		b, err := s.tty.ReadPassword()
		fmt.Fprintln(s.prompts)
		if err != nil {
			return nil, fmt.Errorf("reading the %s: %w", what, err)
		}
		if len(b) == 0 {
			return nil, fmt.Errorf("the %s is empty", what)
		}
		return b, nil
	}
	prompt := strings.ToUpper(what[:1]) + what[1:]
	p, err := ask(prompt)
	if err != nil || !confirm {
		return p, err
	}
	again, err := ask(prompt + " again")
	if err != nil {
		clear(p)
		return nil, err
	}
	defer clear(again)
	if !bytes.Equal(p, again) {
		clear(p)
		return nil, fmt.Errorf("the two %ss typed differ", what)
	}
	return p, nil
}

// addSubcommands adds to the command group cmd the subcommands that subs
// make, and returns cmd. (NewRoot makes every group refuse a word that is
// not one of its subcommands: see requireSubcommands.)
func addSubcommands(e *env, cmd *cobra.Command, subs []func(*env) *cobra.Command) *cobra.Command {
	for _, c := range subs {
		cmd.AddCommand(c(e))
	}
	return cmd
}

// requireSubcommand makes the command group cmd refuse a word that is not
// one of its subcommands, suggesting the nearest: cobra would print the
// group's help and exit 0, so that a typo in a script passed unnoticed.
// Without arguments the group prints its help, as before.
func requireSubcommand(cmd *cobra.Command) {
	cmd.SuggestionsMinimumDistance = 2 // cobra's default, which SuggestionsFor does not apply
	cmd.Args = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		msg := fmt.Sprintf("%s has no command %q", c.CommandPath(), args[0])
		if s := c.SuggestionsFor(args[0]); len(s) > 0 {
			msg += " (did you mean " + strings.Join(s, " or ") + "?)"
		}
		return errors.New(msg + "; see " + c.CommandPath() + " --help")
	}
	cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
}

// exactArgs is cobra.ExactArgs saying what the arguments are, in the words
// of the command's usage line.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return argsError(cmd, args)
		}
		return nil
	}
}

// minArgs is cobra.MinimumNArgs saying what the arguments are.
func minArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return argsError(cmd, args)
		}
		return nil
	}
}

// argsError says that cmd was given the wrong number of arguments, as
// "veil people merge takes FROM INTO (got 1 argument)".
func argsError(cmd *cobra.Command, args []string) error {
	want := strings.TrimSpace(strings.TrimPrefix(cmd.Use, cmd.Name()))
	return fmt.Errorf("%s takes %s (got %s)", cmd.CommandPath(), want, plural(len(args), "argument"))
}

// kdfFlags choose Argon2id's cost for a new key.
type kdfFlags struct {
	timeCost  uint32
	memoryMiB uint32
	threads   uint8
}

func (k *kdfFlags) register(cmd *cobra.Command) {
	d := tagging.DefaultKDFParams()
	m := tagging.MinKDFParams()
	cmd.Flags().Uint32Var(&k.timeCost, "argon2-time", d.Time, "Argon2id passes over memory (advanced: the default is chosen for desktops)")
	cmd.Flags().Uint32Var(&k.memoryMiB, "argon2-memory", d.MemoryKiB>>10, fmt.Sprintf(
		"Argon2id memory in MiB (advanced; lower only on a machine that cannot spare it; at least %d, and passes × MiB at least %d, unless $%s=1 for tests)",
		m.MemoryKiB>>10, m.Time*(m.MemoryKiB>>10), envTestSettings))
	cmd.Flags().Uint8Var(&k.threads, "argon2-threads", d.Threads, "Argon2id lanes (advanced)")
}

func (k *kdfFlags) options() (tagging.CreateOptions, error) {
	if k.memoryMiB == 0 || k.memoryMiB > 4<<10 {
		return tagging.CreateOptions{}, fmt.Errorf("--argon2-memory %d MiB: want 1 to 4096", k.memoryMiB)
	}
	if k.timeCost == 0 || k.threads == 0 {
		return tagging.CreateOptions{}, errors.New("--argon2-time and --argon2-threads must be at least 1")
	}
	return tagging.CreateOptions{KDF: tagging.KDFParams{Time: k.timeCost, MemoryKiB: k.memoryMiB << 10, Threads: k.threads},
		TestSettings: os.Getenv(envTestSettings) == "1"}, nil
}

// keyInputs reads what init and rekey need, in this order so that bad
// flags are refused before any prompt: the library folder, the Argon2id
// costs of the (new) key and the (current) passphrase, asked twice when
// confirm.
func (f *libraryFlags) keyInputs(e *env, kf *kdfFlags, confirm bool) (dir string, opt tagging.CreateOptions, pass []byte, err error) {
	if dir, err = f.folder(); err != nil {
		return "", tagging.CreateOptions{}, nil, err
	}
	if opt, err = kf.options(); err != nil {
		return "", tagging.CreateOptions{}, nil, err
	}
	if pass, err = f.passphrase(e, confirm); err != nil {
		return "", tagging.CreateOptions{}, nil, err
	}
	return dir, opt, pass, nil
}

func newLibraryInitCmd(e *env) *cobra.Command {
	var lf libraryFlags
	var kf kdfFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create a new encrypted library",
		Long: `Init creates a library in --library DIR (made if missing, readable only by you)
with a new random key, locked by your passphrase: from --key-file, else
$VEIL_PASSPHRASE, else asked twice on the terminal.

The passphrase must have at least 10 characters. It is stretched with Argon2id
(3 passes over 256 MiB, 4 lanes: about a second of processor time per unlock,
costly to guess); the --argon2-* flags change that for a machine that cannot
spare the memory, down to 3 passes over 64 MiB (RFC 9106's lower choice).
Tests and demos that need a cheaper key set VEIL_TEST_SETTINGS=1, which lifts
both limits: never for a library of real photos.

Exit status: 0 when the library was created; 1 on bad input or when DIR already
holds a library.`,
		Example: `  veil library init --library ~/Pictures/veil
  VEIL_PASSPHRASE=... veil library init --library lib --json
  veil library init --library lib --key-file ~/.veil-key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, opt, pass, err := lf.keyInputs(e, &kf, true)
			if err != nil {
				return err
			}
			defer clear(pass)
			l, err := tagging.Create(dir, pass, opt)
			if err != nil {
				return err
			}
			if err := l.Close(); err != nil {
				return err
			}
			p := opt.KDF
			if asJSON {
				return writeJSON(e.stdout, map[string]any{
					"library":        dir,
					"schema_version": tagging.SchemaVersion,
					"kdf": map[string]any{"algorithm": "argon2id", "time": p.Time,
						"memory_kib": p.MemoryKiB, "threads": p.Threads},
				})
			}
			fmt.Fprintf(e.stdout, "created the library %s (Argon2id: %d passes, %d MiB, %d lanes)\n",
				dir, p.Time, p.MemoryKiB>>10, p.Threads)
			return nil
		},
	}
	lf.register(cmd)
	kf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// libraryRekeyHelp is veil library rekey's --help.
const libraryRekeyHelp = `Rekey replaces the random key of the library in --library DIR by a new one,
re-encrypts every encrypted field and re-authenticates every row under it, and
locks it with a new passphrase. The current passphrase comes from --key-file,
else $VEIL_PASSPHRASE, else the terminal; the new one from --new-key-file, else
$VEIL_NEW_PASSPHRASE, else the terminal (asked twice). The new key is stretched
with the --argon2-* costs and a new salt.

Afterwards neither the old passphrase nor an old copy of the library's key
header opens anything in the library. (A copy of the whole library made before
still opens with the old passphrase: delete such copies.)

It works in small steps, each committed, with progress on stderr. If it is
interrupted (Ctrl-C, a crash, a power cut), the library cannot be used until
you run veil library rekey again with the same current passphrase: it goes on
where it stopped.

Exit status: 0 when the key was changed; 2 on a wrong current passphrase
(nothing changed); 130 when interrupted (run it again); 1 on other errors.`

func newLibraryRekeyCmd(e *env) *cobra.Command {
	var lf libraryFlags
	var kf kdfFlags
	var newKeyFile string
	var quiet bool
	cmd := &cobra.Command{
		Use:   "rekey",
		Short: "Change the library's key and passphrase",
		Long:  libraryRekeyHelp,
		Example: `  veil library rekey --library lib
  VEIL_PASSPHRASE=old VEIL_NEW_PASSPHRASE=new veil library rekey --library lib`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, opt, old, err := lf.keyInputs(e, &kf, false)
			if err != nil {
				return err
			}
			defer clear(old)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var bar *progress.Bar
			var last int64
			// The new passphrase is asked once the current one has
			// unlocked the library: Argon2id runs once for each.
			err = tagging.RotateKey(ctx, dir, old, func() ([]byte, error) { return newPassphrase(e, old, newKeyFile) }, opt,
				func(done, total int64) {
					if bar == nil {
						bar = progress.New(e.stderr, "re-encrypting", int(total), quiet)
					}
					bar.Add(int(done - last))
					last = done
				})
			bar.Done()
			if err != nil {
				if ctx.Err() != nil && errors.Is(err, context.Canceled) {
					return &exitError{code: exitInterrupted, err: errors.New("interrupted: run veil library rekey again with the same current passphrase to finish")}
				}
				return wrongPassphraseExit(err)
			}
			fmt.Fprintf(e.stdout, "changed the key and the passphrase of %s\n", dir)
			return nil
		},
	}
	lf.register(cmd)
	kf.register(cmd)
	cmd.Flags().StringVar(&newKeyFile, "new-key-file", "", "read the new passphrase from this file (default $"+envNewPassphrase+", else a prompt)")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress output on stderr")
	return cmd
}

// newPassphrase reads the new passphrase, refusing the current one.
func newPassphrase(e *env, old []byte, newKeyFile string) ([]byte, error) {
	newPass, err := readPassphrase(e, passphraseSource{keyFile: newKeyFile, keyFlag: "--new-key-file",
		envVar: envNewPassphrase, what: "new passphrase"}, true)
	if err != nil {
		return nil, err
	}
	if bytes.Equal(old, newPass) {
		clear(newPass)
		return nil, errors.New("the new passphrase is the current one")
	}
	return newPass, nil
}
