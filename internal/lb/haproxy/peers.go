package haproxy

import (
	"fmt"
	"strings"
	"time"

	"github.com/haproxytech/client-native/v5/configuration"
	"github.com/haproxytech/client-native/v5/models"

	"github.com/repool/repool/internal/lb/inventory"
)

// PeersBackend holds the LB hosts' monitor ports, checked at layer 4 only:
// whether this host can reach another LB host, never what that host's
// HAProxy thinks (a verdict that depended on the peer's verdict could lock
// both hosts in failure once they had both failed).
const PeersBackend = "lb_peers"

// Peer checks: a TCP connect to each LB host's monitor port every
// PeerCheckInter, down after PeerCheckFall failures (the connect gives up
// after the defaults' timeout connect), so that a host cut off from the
// network fails its monitor well before its peer's VRRP master-down
// interval (three adverts) makes the peer MASTER.
const (
	PeerCheckInter = 200 * time.Millisecond
	PeerCheckFall  = 2
)

// buildPeers writes PeersBackend and returns the condition under which the
// monitor frontend fails (monitor fail if ...): this host is cut off, it
// sees no repool server alive (no server of any group is UP or NOLB: a
// cluster without an active server still has standbys that answer) and no
// other LB host. Keepalived's track script then puts the host in FAULT,
// which releases the VIP: during a partition that leaves its link up, the
// cut-off host does not go on holding the VIP beside the host that took it
// over, and once healed it comes back as BACKUP (nopreempt), so the VIP
// does not move back. A cluster whose servers are all down keeps the VIP
// where it is as long as the LB hosts reach each other (HAProxy answers
// at once that no server is alive); a lone LB host (no peer) never fails
// its monitor. Rendered for one host (fr.self), the backend lists the
// other hosts; rendered for every host, it lists them all, and the
// host's own entry, always reachable, counts once more.
func buildPeers(conf configuration.Configuration, tx string, inv *inventory.Inventory, fr front) (string, error) {
	var peers []inventory.LBHost
	for _, h := range inv.LBHosts {
		if h.Name != fr.self {
			peers = append(peers, h)
		}
	}
	need := 1 // peers up that show this host is not alone
	if fr.self == "" {
		need = 2
	}
	if len(peers) < need || len(inv.Servers) == 0 {
		return "", nil
	}
	if err := conf.CreateBackend(&models.Backend{Name: PeersBackend, Mode: "tcp"}, tx, 0); err != nil {
		return "", fmt.Errorf("backend %s: %w", PeersBackend, err)
	}
	for _, h := range peers {
		if err := conf.CreateServer("backend", PeersBackend, &models.Server{
			Name:    h.Name,
			Address: h.Address,
			Port:    ptr(int64(h.MonitorPort)),
			ServerParams: models.ServerParams{
				Check: "enabled",
				Inter: ms(PeerCheckInter),
				Fall:  ptr(int64(PeerCheckFall)),
				Rise:  ptr(int64(1)),
			},
		}, tx, 0); err != nil {
			return "", fmt.Errorf("backend %s server %s: %w", PeersBackend, h.Name, err)
		}
	}
	var cond strings.Builder
	for _, s := range inv.Servers {
		fmt.Fprintf(&cond, "!{ srv_is_up(%s/%s) } ", BackendFor(s.Group), s.Name)
	}
	fmt.Fprintf(&cond, "{ nbsrv(%s) lt %d }", PeersBackend, need)
	return cond.String(), nil
}
