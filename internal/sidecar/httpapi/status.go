package httpapi

import (
	"net/http"
	"sort"
	"time"

	"github.com/repool/repool/internal/sidecar/resilience"
	"github.com/repool/repool/internal/statuspage"
)

// statusPage is GET /status: the sidecar's providers, their breakers,
// fast failures, bulkheads and tokens, as HTML for a person
// (docs/sidecar.md#status-page). It reads the sidecar's own state and calls
// no provider. Like every route it is behind the guard: a page of another
// site cannot load it, and it sends no CORS header.
var statusPage = statuspage.New("sidecar", `{{define "body"}}
<h1>repool sidecar status</h1>
<p class="sub">{{len .}} provider{{if ne (len .) 1}}s{{end}}. JSON: <a href="/v1/breakers">/v1/breakers</a>, <a href="/readyz">/readyz</a>, <a href="/metrics">/metrics</a>.</p>
<table>
<tr><th>provider</th><th>breaker</th><th>last failure and its cause</th><th>last trip</th><th>fast-fail rate (last minute)</th><th>bulkhead</th><th>token</th></tr>
{{range .}}<tr>
<td><strong>{{.Name}}</strong>{{if .Tenant}}<br><span class="muted">tenant {{.Tenant}}</span>{{end}}</td>
<td class="{{.StateClass}}">{{.State}}<br><span class="muted">since {{when .Since}}{{if .RetryAfter}}; retries in {{secs .RetryAfter}}{{end}}</span></td>
<td>{{if .LastCause}}<code>{{.LastFailure}}</code>: {{.LastCause}}{{else}}<span class="muted">none</span>{{end}}</td>
<td>{{if .Trips}}{{.Trips}} trip{{if ne .Trips 1}}s{{end}}, the last at {{when .LastTrip}}:<br>{{.LastTripReason}}{{else}}<span class="muted">never opened</span>{{end}}</td>
<td class="num {{if .FastFails}}warn{{end}}">{{.FastRate}}<br><span class="muted">{{.FastFails}} of {{.Calls}} calls</span></td>
<td class="num">{{.InFlight}} in flight / limit {{.Limit}}{{if .Waiting}}, {{.Waiting}} waiting{{end}}{{if .Slow}}<br><span class="warn">slow</span>{{end}}</td>
<td class="{{.TokenClass}}">{{.Token}}</td>
</tr>
{{else}}<tr><td colspan="7" class="muted">no providers</td></tr>{{end}}
</table>{{end}}`, nil, nil)

// providerStatus is one provider's row of the status page.
type providerStatus struct {
	Name, Tenant, State, StateClass        string
	Since, LastTrip                        time.Time
	RetryAfter                             time.Duration
	Trips                                  uint64
	LastTripReason, LastFailure, LastCause string
	Calls, FastFails                       uint64
	FastRate                               string
	InFlight, Limit, Waiting               int
	Slow                                   bool
	Token, TokenClass                      string
}

// status serves the status page.
func (a *API) status(w http.ResponseWriter, r *http.Request) {
	provs := a.providers.All()
	sort.Slice(provs, func(i, j int) bool { return provs[i].Name() < provs[j].Name() })
	now := a.clock.Now()
	rows := make([]providerStatus, 0, len(provs))
	for _, p := range provs {
		s, bh, rc, tk := p.Breaker().Status(), p.Bulkhead().Status(), p.Recent(), p.Tokens()
		row := providerStatus{Name: p.Name(), Tenant: tk.Tenant, State: s.State.String(), Since: s.Since,
			RetryAfter: s.RetryAfter, Trips: s.Trips, LastTrip: s.LastTrip, LastTripReason: s.LastTripReason,
			LastCause: s.LastCause, Calls: rc.Calls, FastFails: rc.FastFails, FastRate: "-",
			InFlight: bh.InFlight, Limit: bh.Limit, Waiting: bh.Waiting, Slow: bh.Slow}
		if s.LastCause != "" {
			row.LastFailure = s.LastFailure.String()
		}
		switch s.State {
		case resilience.StateOpen:
			row.StateClass = "bad"
		case resilience.StateHalfOpen:
			row.StateClass = "warn"
		default:
			row.StateClass = "good"
		}
		if rc.Calls > 0 {
			row.FastRate = statuspage.Percent(float64(rc.FastFails) / float64(rc.Calls))
		}
		switch {
		case !tk.Held:
			row.Token, row.TokenClass = "none held yet", "warn"
		case !now.Before(tk.ExpiresAt):
			row.Token, row.TokenClass = "expired at "+statuspage.When(tk.ExpiresAt), "bad"
		case tk.Failing:
			row.Token, row.TokenClass = "valid until "+statuspage.When(tk.ExpiresAt)+"; refreshing it fails", "warn"
		default:
			row.Token, row.TokenClass = "valid until "+statuspage.When(tk.ExpiresAt), "good"
		}
		rows = append(rows, row)
	}
	if err := statusPage.Render(w, http.StatusOK, "repool sidecar status", rows); err != nil {
		a.log.Error("status page not rendered", "err", err)
	}
}
