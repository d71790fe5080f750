// Package statuspage renders the read-only HTML status pages of the server
// (internal/control) and the sidecar (internal/sidecar/httpapi): one
// layout with its stylesheet, the security headers every page carries, and
// the formatting helpers the page templates share.
//
// Pages are rendered on the server with html/template, which escapes
// everything the data holds (tenant names, resource ids, error causes) for
// its HTML context; they load nothing else and run no script. The
// Content-Security-Policy allows the page's own stylesheet (by its hash)
// and nothing more: no script, no image, no frame, no form posted anywhere
// but to the page's own origin, and no page may frame it.
package statuspage

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"html/template"
	"net/http"
	"time"
)

// css is the pages' stylesheet, inlined in the layout and allowed by its
// hash in the Content-Security-Policy.
const css = `
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d1d1f;background:#fff}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.15em;margin:1.4em 0 .4em}
p.sub{color:#555;margin:0 0 1em}
table{border-collapse:collapse;margin:.3em 0 1em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f2f2f2}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.bad{background:#fde2e1;color:#8a1c14;font-weight:600}
.warn{background:#fff4d6;color:#6b4e00;font-weight:600}
.good{color:#1b6e2a;font-weight:600}
.muted{color:#777}
code{font:12px ui-monospace,monospace;white-space:pre-wrap;word-break:break-all}
form{margin:.5em 0}input[type=password]{width:32em}
nav a{margin-right:1em}
`

// csp is the pages' Content-Security-Policy: the inline stylesheet above
// by its hash, forms posted to the page's origin only, nothing else.
var csp = func() string {
	sum := sha256.Sum256([]byte(css))
	return "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) +
		"'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
}()

// layout is the document around each page's "body" template.
const layout = `<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="same-origin">
<title>{{.Title}}</title>
<style>` + css + `</style>
</head><body>
{{template "body" .Data}}
<p class="muted">Rendered {{when .Now}}. This page is read-only; reload it to refresh.</p>
</body></html>
`

// Funcs are the helpers every page template may call.
func Funcs() template.FuncMap {
	return template.FuncMap{
		"when": When,
		"pct":  Percent,
		"secs": Seconds,
	}
}

// When formats t in UTC to the second, or "-" for the zero time.
func When(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// Percent formats a ratio in [0, 1] as a percentage with one decimal.
func Percent(r float64) string { return fmt.Sprintf("%.1f %%", 100*r) }

// Seconds formats d in seconds with one decimal.
func Seconds(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

// Page is one parsed page: the layout and its body template.
type Page struct {
	tmpl *template.Template
	now  func() time.Time
}

// New parses body, which must define a template named "body" executed
// with the data given to Render, into the layout. funcs adds helpers to
// Funcs. It panics on a template error: the templates are the program's
// own constants.
func New(name, body string, funcs template.FuncMap, now func() time.Time) *Page {
	t := template.New(name).Funcs(Funcs()).Funcs(funcs)
	template.Must(t.Parse(layout))
	template.Must(t.Parse(body))
	if now == nil {
		now = time.Now
	}
	return &Page{tmpl: t, now: now}
}

// SetHeaders sets the headers every status page and its refusals carry:
// HTML, the Content-Security-Policy, no framing, no content sniffing, no
// referrer to other sites (a same-origin one, so that a browser sends the
// page's Origin with its forms), no caching (a page holds what a token let its reader see).
func SetHeaders(h http.Header) {
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}

// Render writes the page titled title with data and status code, with
// SetHeaders' headers. It renders into memory first, so a template error
// is a 500 with a plain message rather than half a page; that error is
// returned for the caller to log.
func (p *Page) Render(w http.ResponseWriter, code int, title string, data any) error {
	var buf bytes.Buffer
	err := p.tmpl.Execute(&buf, struct {
		Title string
		Now   time.Time
		Data  any
	}{title, p.now(), data})
	SetHeaders(w.Header())
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte("<!doctype html><title>error</title><p>The page could not be rendered; the server's log says why.</p>\n"))
		return err
	}
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
	return nil
}
