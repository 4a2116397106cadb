package keygen

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/veil-privacy/veil/fed/keygenpb"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/secagg/dphe"
)

// DefaultMaxMessageBytes bounds a request's size (a packed aggregate of
// the head's 557,824 values under a 2048-bit key is about 5.6 MB; an
// unpacked one 286 MB and needs a larger limit).
const DefaultMaxMessageBytes = 64 << 20

// TLSConfig returns the key generator's TLS configuration: TLS 1.3, its own
// certificate, and every caller's certificate verified against the
// authority, named by a valid name, and not revoked (rev may be nil:
// nothing revoked). Unlike pki.ServerTLS it accepts the coordinator's
// server certificate as a client certificate, since the coordinator calls
// the key generator; what each caller may do is decided by its role and
// name per call.
func TLSConfig(id *pki.Identity, rev *pki.Revocations) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{id.Cert},
		ClientAuth:   tls.RequireAnyClientCert,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			leaf, err := verifyPeer(raw, id.Pool)
			if err != nil {
				return err
			}
			return rev.Check(leaf)
		},
	}
}

// verifyPeer parses and verifies a peer's chain against the authority,
// for any key usage, and checks its name.
func verifyPeer(raw [][]byte, roots *x509.CertPool) (*x509.Certificate, error) {
	if len(raw) == 0 {
		return nil, errors.New("keygen: no client certificate")
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, b := range raw {
		c, err := x509.ParseCertificate(b)
		if err != nil {
			return nil, fmt.Errorf("keygen: peer certificate: %w", err)
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("keygen: peer certificate: %w", err)
	}
	if err := pki.CheckName(certs[0].Subject.CommonName); err != nil {
		return nil, err
	}
	return certs[0], nil
}

// NewServer returns a gRPC server of the service over TLSConfig(id, rev),
// accepting requests up to maxMessage bytes (0: DefaultMaxMessageBytes).
func NewServer(s *Service, id *pki.Identity, rev *pki.Revocations, maxMessage int) *grpc.Server {
	if maxMessage <= 0 {
		maxMessage = DefaultMaxMessageBytes
	}
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(TLSConfig(id, rev))), grpc.MaxRecvMsgSize(maxMessage), grpc.MaxSendMsgSize(maxMessage))
	keygenpb.RegisterKeyGeneratorServer(g, s)
	return g
}

// peerOf returns the verified name and role of the caller.
func peerOf(ctx context.Context) (string, pki.Role, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", 0, status.Error(codes.Unauthenticated, "no peer")
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return "", 0, status.Error(codes.Unauthenticated, "no client certificate")
	}
	leaf := ti.State.PeerCertificates[0] // verified by TLSConfig's VerifyPeerCertificate
	return leaf.Subject.CommonName, pki.RoleOf(leaf), nil
}

// PublicKey returns the Paillier public key to any caller of the authority.
func (s *Service) PublicKey(ctx context.Context, req *keygenpb.PublicKeyRequest) (*keygenpb.PublicKeyReply, error) {
	if err := checkVersion(req.GetVersion()); err != nil {
		return nil, err
	}
	if _, _, err := peerOf(ctx); err != nil {
		return nil, err
	}
	return &keygenpb.PublicKeyReply{Version: keygenpb.ProtocolVersion, PublicKey: s.pub, FracBits: int32(s.st.FracBits)}, nil
}

// SetupRound draws a round's keys for the coordinator.
func (s *Service) SetupRound(ctx context.Context, req *keygenpb.SetupRoundRequest) (*keygenpb.AggregatorKeys, error) {
	if err := checkVersion(req.GetVersion()); err != nil {
		return nil, err
	}
	if err := s.requireCoordinator(ctx, "set up rounds"); err != nil {
		return nil, err
	}
	p, clients, err := s.roundParams(req)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.kg.NewRound(p); err != nil {
		return nil, grpcError(err)
	}
	s.names[p.Round] = clients
	if err := s.saveLocked(); err != nil {
		return nil, status.Errorf(codes.Unavailable, "round %d set up but not recorded; set up another round: %v", p.Round, err)
	}
	s.log.Info("round set up", "round", p.Round, "clients", len(clients), "dim", p.Dim, "packed", p.Packing != nil)
	return s.roundKeysLocked(p.Round)
}

// RoundKeys returns an open round's aggregator keys again, for the
// coordinator after a restart.
func (s *Service) RoundKeys(ctx context.Context, req *keygenpb.UserKeysRequest) (*keygenpb.AggregatorKeys, error) {
	if err := checkVersion(req.GetVersion()); err != nil {
		return nil, err
	}
	if err := s.requireCoordinator(ctx, "read a round's keys"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.roundKeysLocked(req.GetRound())
}

// roundKeysLocked returns an open round's aggregator keys. s.mu is held.
func (s *Service) roundKeysLocked(round uint64) (*keygenpb.AggregatorKeys, error) {
	p, err := s.kg.Params(round)
	if err != nil {
		return nil, grpcError(err)
	}
	ak, err := s.kg.AggregatorKeys(round)
	if err != nil {
		return nil, grpcError(err)
	}
	return aggregatorKeysPB(ak, s.names[round], s.pub, p.Packing), nil
}

// roundParams validates a setup request and returns the round's
// parameters and its clients sorted (user id = index + 1).
func (s *Service) roundParams(req *keygenpb.SetupRoundRequest) (dphe.RoundParams, []string, error) {
	clients := slices.Clone(req.GetClients())
	slices.Sort(clients)
	if len(slices.Compact(slices.Clone(clients))) != len(clients) {
		return dphe.RoundParams{}, nil, errors.New("a client is named twice")
	}
	for _, c := range clients {
		if err := pki.CheckName(c); err != nil {
			return dphe.RoundParams{}, nil, err
		}
	}
	if len(clients) < dphe.MinUsers {
		return dphe.RoundParams{}, nil, fmt.Errorf("a round needs at least %d clients, got %d", dphe.MinUsers, len(clients))
	}
	p := dphe.RoundParams{Round: req.GetRound(), Dim: int(req.GetCoordinates()), Capacity: int(req.GetCapacity())}
	for i := range clients {
		p.Users = append(p.Users, uint32(i+1))
	}
	if req.GetPack() {
		pack, err := dphe.NewPacking(s.kg.PublicKey(), s.st.FracBits, int(req.GetCoordinates()), req.GetBound(), int(req.GetMaxUsers()))
		if err != nil {
			return dphe.RoundParams{}, nil, err
		}
		p.Packing, p.Dim = pack, pack.Blocks()
	}
	return p, clients, nil
}

// ClientKeys returns the caller's own keys for an open round.
func (s *Service) ClientKeys(ctx context.Context, req *keygenpb.UserKeysRequest) (*keygenpb.UserKeys, error) {
	if err := checkVersion(req.GetVersion()); err != nil {
		return nil, err
	}
	name, role, err := peerOf(ctx)
	if err != nil {
		return nil, err
	}
	if role != pki.Client {
		return nil, status.Errorf(codes.PermissionDenied, "only clients receive round keys; the caller is %s %q", role, name)
	}
	s.mu.Lock()
	idx := slices.Index(s.names[req.GetRound()], name)
	s.mu.Unlock()
	if idx < 0 {
		return nil, status.Errorf(codes.PermissionDenied, "client %q is not in open round %d", name, req.GetRound())
	}
	uk, err := s.kg.UserKeys(req.GetRound(), uint32(idx+1))
	if err != nil {
		return nil, grpcError(err)
	}
	defer uk.Zero()
	return userKeysPB(uk, s.pub), nil
}

// Decrypt decrypts a round's aggregate for the coordinator, once.
func (s *Service) Decrypt(ctx context.Context, req *keygenpb.DecryptRequest) (*keygenpb.DecryptReply, error) {
	if err := checkVersion(req.GetVersion()); err != nil {
		return nil, err
	}
	if err := s.requireCoordinator(ctx, "ask for a decryption"); err != nil {
		return nil, err
	}
	agg, err := dphe.DecodeAggregate(req.GetAggregate(), s.kg.PublicKey())
	if err != nil {
		return nil, grpcError(err)
	}
	s.mu.Lock()
	names := slices.Clone(s.names[agg.Round])
	s.mu.Unlock()
	res, err := s.kg.Decrypt(agg)
	if err != nil {
		s.log.Warn("decryption refused", "round", agg.Round, "reason", err.Error())
		return nil, grpcError(err)
	}
	reply := &keygenpb.DecryptReply{Version: keygenpb.ProtocolVersion, Round: res.Round, Sum: res.Sum}
	for _, u := range res.Users {
		if int(u) > len(names) || u == 0 {
			return nil, status.Errorf(codes.Internal, "round %d: user %d has no client name", res.Round, u)
		}
		reply.Clients = append(reply.Clients, names[u-1])
	}
	s.log.Info("round decrypted", "round", res.Round, "clients", len(res.Users))
	return reply, nil
}

func packingPB(p *dphe.Packing) *keygenpb.Packing {
	if p == nil {
		return nil
	}
	return &keygenpb.Packing{Coordinates: uint32(p.Coordinates), Lanes: uint32(p.Lanes), Bound: p.Bound, MaxUsers: uint32(p.MaxUsers)}
}

func aggregatorKeysPB(ak *dphe.AggregatorKeys, clients []string, pub []byte, pack *dphe.Packing) *keygenpb.AggregatorKeys {
	out := &keygenpb.AggregatorKeys{Version: keygenpb.ProtocolVersion, Round: ak.Round, Dim: uint32(ak.Dim), Capacity: uint32(ak.Capacity),
		Packing: packingPB(pack), PublicKey: pub}
	for i, c := range clients {
		u := ak.Users[uint32(i+1)]
		out.Users = append(out.Users, &keygenpb.AggregatorUser{Client: c, UserId: uint32(i + 1), PhiUser: u.PhiUser, MacKey: u.MACKey[:]})
	}
	return out
}

func userKeysPB(uk *dphe.UserKeys, pub []byte) *keygenpb.UserKeys {
	return &keygenpb.UserKeys{Version: keygenpb.ProtocolVersion, Round: uk.Round, UserId: uk.UserID, Dim: uint32(uk.Dim), Capacity: uint32(uk.Capacity),
		FracBits: int32(uk.FracBits), Phi: slices.Clone(uk.Phi), PhiUser: slices.Clone(uk.PhiUser), MacKey: slices.Clone(uk.MACKey[:]),
		TagKey: slices.Clone(uk.TagKey[:]), ChecksumKey: slices.Clone(uk.ChecksumKey[:]), ChecksumOffset: uk.ChecksumOffset.Bytes(),
		Packing: packingPB(uk.Packing), PublicKey: pub}
}
