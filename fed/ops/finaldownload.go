package ops

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
)

// watchDownloads records, per client, the model version it last
// downloaded in full (ServerOptions.AwaitFinalDownload).
func (s *Server) watchDownloads(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !s.o.AwaitFinalDownload || !strings.HasSuffix(info.FullMethod, "/DownloadModel") {
		return handler(srv, ss)
	}
	w := &downloadWatcher{ServerStream: ss}
	err := handler(srv, w)
	if err == nil && w.version != "" {
		if name := peerName(ss.Context()); name != "" {
			s.mu.Lock()
			s.fetched[name] = w.version
			s.mu.Unlock()
		}
	}
	return err
}

type downloadWatcher struct {
	grpc.ServerStream
	version string
}

func (w *downloadWatcher) RecvMsg(m any) error {
	err := w.ServerStream.RecvMsg(m)
	if r, ok := m.(*fedpb.ModelRequest); ok && err == nil {
		w.version = r.GetModelVersion()
	}
	return err
}

// peerName is the certificate name of ctx's caller ("" if none).
func peerName(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			if name, _, err := pki.PeerName(ti.State); err == nil {
				return name
			}
		}
	}
	return ""
}

// allFetched reports whether every client of ids has downloaded the
// coordinator's current (after the run, final) model. s.mu is held.
func (s *Server) allFetched(ids []string) bool {
	_, final := s.o.Coordinator.Model()
	for _, id := range ids {
		if s.fetched[id] != final {
			return false
		}
	}
	return true
}
