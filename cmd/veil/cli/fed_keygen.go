package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/fed/keygen"
	"github.com/veil-privacy/veil/fed/ops"
	"github.com/veil-privacy/veil/secagg/paillier"
)

// keygenFlags are veil fed keygen's flags.
type keygenFlags struct {
	pki, name, cert, key, ca, crl, listen, state, coordinator, logLevel, logFormat string
	bits, fracBits, maxMessageMiB                                                  int
	unsafe                                                                         bool
}

func newFedKeygenCmd(e *env) *cobra.Command {
	f := &keygenFlags{name: "keygen", listen: "127.0.0.1:7444", coordinator: "coordinator", bits: paillier.DefaultBits,
		fracBits: keygen.DefaultFracBits, maxMessageMiB: keygen.DefaultMaxMessageBytes >> 20, logLevel: "info", logFormat: "text"}
	cmd := &cobra.Command{
		Use:   "keygen",
		Short: "Serve DPHE's key generator: round keys for the coordinator and clients, decryption of authenticated sums only",
		Long: `Serve the key generator of DPHE (doubly-permuted homomorphic encryption) over
gRPC with mutual TLS, as a party of its own: another machine or operator
than the coordinator's. It holds the Paillier private key and, per round,
the permutations and keys it derives from a seed, in --state (a folder,
0700, that one key generator at a time may use; kill -9 loses nothing).

Only the coordinator (--coordinator, its certificate's name) may set up
rounds and ask for a round's sum; a client receives only its own keys of a
round it is in. The sum is decrypted only when it holds the complete,
authenticated contributions of at least three of the round's clients, once
per round, also across restarts. Its certificate is a server certificate:
veil fed certs issue keygen --role coordinator --host HOST.`,
		Example: `  veil fed keygen --pki ca/ --name keygen --listen 0.0.0.0:7444 --state keygen-state/`,
		Args:    needArgs(0, 0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runFedKeygen(cmd.Context(), e, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.pki, "pki", "", "folder holding NAME.crt, NAME.key, ca.crt and revoked.crl")
	fl.StringVar(&f.name, "name", f.name, "the key generator certificate's name in --pki")
	fl.StringVar(&f.cert, "cert", "", "the key generator's certificate (instead of --pki)")
	fl.StringVar(&f.key, "key", "", "the key generator's private key (instead of --pki)")
	fl.StringVar(&f.ca, "ca", "", "the authority's certificate (instead of --pki)")
	fl.StringVar(&f.crl, "crl", "", "the authority's revocation list (default: revoked.crl beside ca.crt)")
	fl.StringVar(&f.listen, "listen", f.listen, "gRPC address (host:port)")
	fl.StringVar(&f.state, "state", "", "the key generator's state folder (required; created 0700)")
	fl.StringVar(&f.coordinator, "coordinator", f.coordinator, "the coordinator certificate's name: the only caller that sets up rounds and asks for sums")
	fl.IntVar(&f.bits, "bits", f.bits, "Paillier modulus size of a new key (2048 or 3072); an existing state keeps its key")
	fl.IntVar(&f.fracBits, "frac-bits", f.fracBits, "fixed-point scale 2^frac-bits of a new state")
	fl.IntVar(&f.maxMessageMiB, "max-message-mib", f.maxMessageMiB, "largest request accepted, in MiB (an unpacked aggregate of d values takes d×512 bytes)")
	fl.StringVar(&f.logLevel, "log-level", f.logLevel, "debug, info, warn or error")
	fl.StringVar(&f.logFormat, "log-format", f.logFormat, "text or json")
	insecureKeyFlag(cmd, &f.unsafe)
	return cmd
}

func runFedKeygen(ctx context.Context, e *env, f *keygenFlags) error {
	if f.state == "" {
		return fmt.Errorf("--state is required: the folder that keeps the key and the open rounds")
	}
	err := checkFlags(keyBitsCheck(f.bits, f.unsafe), intIn("frac-bits", f.fracBits, 1, paillier.MaxFracBits), atLeast("max-message-mib", f.maxMessageMiB, 1))
	if err != nil {
		return err
	}
	certP, keyP, caP, crlP, err := ops.IdentityFiles(f.pki, f.name, f.cert, f.key, f.ca, f.crl)
	if err != nil {
		return err
	}
	id, err := ops.LoadIdentity(certP, keyP, caP)
	if err != nil {
		return err
	}
	log, err := newLogger(e, f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	sctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return keygen.Run(sctx, keygen.RunOptions{
		Options: keygen.Options{Dir: f.state, Coordinator: f.coordinator, Bits: f.bits, AllowInsecureTestKeySize: f.unsafe,
			FracBits: f.fracBits, Logger: log},
		Identity: id, CRL: crlP, Listen: f.listen, MaxMessageBytes: f.maxMessageMiB << 20,
		Ready: func(addr string) { log.Info("key generator serving", "addr", addr, "state", f.state) },
	})
}
