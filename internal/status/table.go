package status

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTable prints c as `server status` shows it: the LB hosts (VRRP
// state, who holds the VIP, HAProxy), then one row per server with how
// each LB host's HAProxy sees it (a column per LB host: state and the
// check's status), then per group its leader, epoch, since when, and its
// standbys (whether each waits on the lock), the database, and the
// warnings. Ages are the server's own (its answer's time minus the
// instant), so clocks of the reader and the servers need not agree.
func (c Cluster) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "LB HOST\tADDRESS\tVRRP\tVIP %s\tHAPROXY\n", c.VIP)
	for _, h := range c.LBHosts {
		vip := "-"
		if h.HoldsVIP {
			vip = "held"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", h.Name, h.Address, dash(h.VRRPState, "?"), vip, up(h.HAProxyUp))
	}
	fmt.Fprintln(tw)

	fmt.Fprint(tw, "SERVER\tGROUP\tROLE\tEPOCH\tLEADER SINCE\tLOCK")
	for _, h := range c.LBHosts {
		fmt.Fprintf(tw, "\t%s", strings.ToUpper(h.Name))
	}
	fmt.Fprintln(tw, "\tVERSION\tCONFIG\tCHECKPOINT\tTENANTS")
	for _, e := range c.Servers {
		fmt.Fprintf(tw, "%s\t%s", e.Name, e.Group)
		st := e.Status
		if st == nil {
			fmt.Fprint(tw, "\t?\t-\t-\t-")
		} else {
			role := st.Role
			if st.Role == RoleActive && !st.Serving {
				role += " (" + st.Reason + ")"
			}
			epoch, since := "-", "-"
			if st.Role == RoleActive {
				epoch = fmt.Sprint(st.Epoch)
			}
			if st.LeaderSince != nil {
				since = Ago(st.Time, *st.LeaderSince)
			}
			fmt.Fprintf(tw, "\t%s\t%s\t%s\t%s", role, epoch, since, lock(st))
		}
		for _, h := range c.LBHosts {
			fmt.Fprintf(tw, "\t%s", seenBy(h, e.Name))
		}
		if st == nil {
			// Why is among the warnings: a long cell here would break
			// the columns.
			fmt.Fprint(tw, "\t-\t-\t-\t-\n")
			continue
		}
		cp := "-"
		if st.LastCheckpoint != nil {
			cp = Ago(st.Time, *st.LastCheckpoint)
		}
		fmt.Fprintf(tw, "\t%s\t%s\t%s\t%d\n", st.Build.Short(), st.ConfigHash, cp, st.Tenants)
	}
	fmt.Fprintln(tw)

	fmt.Fprintln(tw, "GROUP\tLEADER\tEPOCH\tSINCE\tSTANDBYS")
	for _, g := range c.Groups {
		leader, epoch, since := "none", "-", "-"
		if g.Leader != "" {
			leader, epoch = g.Leader, fmt.Sprint(g.Epoch)
			if len(g.Leaders) > 1 {
				leader = strings.Join(g.Leaders, "+")
			}
		}
		if g.LeaderSince != nil {
			since = g.LeaderSince.UTC().Format(time.RFC3339)
		}
		var sb []string
		for _, s := range g.Standbys {
			w := "not waiting"
			if s.Waiting {
				w = "waiting on the lock"
			}
			sb = append(sb, s.Name+" ("+w+")")
		}
		for _, d := range g.Down {
			sb = append(sb, d+" (down)")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", g.Name, leader, epoch, since, dash(strings.Join(sb, ", "), "none"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if db := c.Database; db != nil {
		state := "writable"
		if !db.Writable {
			state = "NOT WRITABLE: " + db.Error
		}
		fmt.Fprintf(w, "\nDATABASE  %s %s, %s\n", db.Kind, db.Address, state)
	}
	if len(c.DBNodes) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "\nDB NODE\tADDRESS\tROLE\tSTATE\tTIMELINE\tLAG")
		for _, n := range c.DBNodes {
			if n.Error != "" {
				fmt.Fprintf(tw, "%s\t%s\t?\t?\t-\t-\n", n.Name, n.Address)
				continue
			}
			lag := "-"
			if n.LagBytes != nil {
				lag = fmt.Sprintf("%d B", *n.LagBytes)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", n.Name, n.Address, n.Role, n.State, n.Timeline, lag)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(c.Warnings) > 0 {
		fmt.Fprintln(w, "\nWARNINGS")
		for _, s := range c.Warnings {
			fmt.Fprintf(w, "  - %s\n", s)
		}
	}
	_, err := fmt.Fprintf(w, "\n(as of %s)\n", c.Time.UTC().Format(time.RFC3339))
	return err
}

// seenBy is how h's HAProxy sees server: "UP L7OK/200", "NOLB L7OKC/404",
// "DOWN L4CON"; "?" when its HAProxy did not answer, "-" when it does not
// list the server.
func seenBy(h LBHost, server string) string {
	if !h.HAProxyUp {
		return "?"
	}
	for _, b := range h.Backends {
		if b.Server == server {
			if b.State == "" {
				return "-"
			}
			return strings.TrimSpace(b.State + " " + b.Check)
		}
	}
	return "-"
}

// lock is the LOCK column: what the server's election does.
func lock(st *Server) string {
	switch {
	case st.Election == nil:
		return "-"
	case st.Election.State == ElectionLeader:
		return "held"
	}
	return st.Election.State
}

// Ago is how long before now t was, rounded for a person: "850ms",
// "42s", "5m12s", "3h04m", "2d03h".
func Ago(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	d = d.Round(time.Hour)
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

func up(ok bool) string {
	if ok {
		return "up"
	}
	return "DOWN"
}

func dash(s, empty string) string {
	if s == "" {
		return empty
	}
	return s
}
