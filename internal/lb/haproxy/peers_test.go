package haproxy_test

import (
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/repool/repool/internal/lb/haproxy/haproxytest"
	"github.com/repool/repool/internal/lb/inventory"
	"github.com/repool/repool/internal/testenv"
)

// TestMonitorFailsOnlyWhenCutOff runs the configuration rendered for lb1 on
// the real HAProxy and reads its monitor URI as Keepalived's track script
// does: 200 while it sees a repool server alive (a standby is enough) or
// its peer lb2's monitor port, 503 only when it sees neither (a host cut
// off the network with its link up, which must give up the VIP), and 200
// again once the peer is reachable.
func TestMonitorFailsOnlyWhenCutOff(t *testing.T) {
	standby := haproxytest.NewServer(t, "standby", http.StatusNotFound)
	dir := t.TempDir()
	inv := haproxytest.LoopbackInventory(t, dir, standby)
	inv.LBHosts[1].MonitorPort = testenv.FreePort(t)
	peerAddr := net.JoinHostPort(inv.LBHosts[1].Address, fmt.Sprint(inv.LBHosts[1].MonitorPort))
	peer := listenPeer(t, peerAddr)
	haproxytest.Start(t, inv, dir)
	monitor := fmt.Sprintf("http://%s%s", net.JoinHostPort(inv.LBHosts[0].Address, fmt.Sprint(inv.LBHosts[0].MonitorPort)), inventory.MonitorURI)
	want := func(status int, why string) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("the monitor to answer %d (%s)", status, why), func() bool {
			resp, err := http.Get(monitor)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == status
		})
	}
	want(http.StatusOK, "a standby alive and the peer reachable")

	peer.Close()
	want(http.StatusOK, "a standby alive, the peer unreachable")

	standby.Stop()
	want(http.StatusServiceUnavailable, "no server alive and no peer: cut off")

	peer = listenPeer(t, peerAddr)
	want(http.StatusOK, "no server alive but the peer reachable: the cluster is down, not this host")

	peer.Close()
	want(http.StatusServiceUnavailable, "cut off again")
	standby.Start(t)
	want(http.StatusOK, "a standby back")
}

// listenPeer stands for the peer LB host's monitor port: it accepts TCP
// connections (the peer check is layer 4) until closed.
func listenPeer(t *testing.T, addr string) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l
}
