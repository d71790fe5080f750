package server

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"time"

	"github.com/repool/repool/internal/buildinfo"
	"github.com/repool/repool/internal/status"
	"github.com/repool/repool/internal/store/open"
)

// Status is this server's status document (GET /status): its role, group,
// epoch, since when it leads, the election's state, its build and
// configuration hash, its store's health, the tenants it serves and the
// age of its last complete checkpoint.
func (s *Server) Status() status.Server {
	now := s.clock.Now()
	code, why := s.role()
	st := status.Server{
		Name: s.cfg.HAName, Time: now, StartedAt: s.started, Serving: code == http.StatusOK, Reason: why,
		Group: s.cfg.Group, Epoch: s.epoch.Load(),
		Build: build(buildinfo.Read()), ConfigHash: s.configHash,
		Store: status.Store{Kind: storeKind(s.storeURL), Address: s.storeURL.Redacted(), Writable: true},
	}
	s.mode.describe(&st)
	switch {
	case !s.ready.Load():
		st.Role = status.RoleNotReady
	case s.lead.Load():
		st.Role = status.RoleActive
	default:
		st.Role = status.RoleStandby
	}
	if ns := s.leaderSince.Load(); ns != 0 && st.Role == status.RoleActive {
		t := time.Unix(0, ns)
		st.LeaderSince = &t
	}
	if err := s.writes.err(); err != nil {
		st.Store.Writable, st.Store.Error = false, err.Error()
	}
	if t, ok := s.cp.LastFull(); ok {
		age := now.Sub(t).Seconds()
		st.LastCheckpoint, st.CheckpointAgeSeconds = &t, &age
	}
	return st
}

func build(in buildinfo.Info) status.Build {
	return status.Build{Version: in.Version, Revision: in.Revision, Modified: in.Modified, GoVersion: in.GoVersion}
}

func storeKind(u open.URL) string {
	if u.Kind == open.Postgres {
		return "postgres"
	}
	return "sqlite"
}

// configHash is the status's configuration hash: SHA-256 (its first 12
// hex digits) of the effective configuration as JSON, without what differs
// from server to server by design (the name and the listen addresses) and
// with the store's URL redacted. Two servers given the same settings have
// the same hash; file paths count, not the files' contents.
func configHash(c Config, u open.URL) string {
	c.HAName, c.GRPCAddr, c.HTTPAddr = "", "", ""
	c.Store = u.Redacted()
	b, err := json.Marshal(c)
	if err != nil {
		return "unknown"
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}
