package statuspage

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRenderHeadersAndStyleHash checks that a page carries the security
// headers and that the CSP's style hash is the hash of the stylesheet the
// page holds: a browser applies the style only then.
func TestRenderHeadersAndStyleHash(t *testing.T) {
	p := New("t", `{{define "body"}}<p>{{.}}</p>{{end}}`, nil, func() time.Time { return time.Unix(0, 0) })
	rec := httptest.NewRecorder()
	if err := p.Render(rec, 200, "a <title>", `<script>alert(1)</script>`); err != nil {
		t.Fatal(err)
	}
	body, h := rec.Body.String(), rec.Result().Header
	for k, want := range map[string]string{"Content-Type": "text/html; charset=utf-8", "X-Frame-Options": "DENY",
		"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store", "Referrer-Policy": "same-origin"} {
		if got := h.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	m := regexp.MustCompile(`(?s)<style>(.*)</style>`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no stylesheet in the page:\n%s", body)
	}
	sum := sha256.Sum256([]byte(m[1]))
	csp := h.Get("Content-Security-Policy")
	if !strings.Contains(csp, "style-src 'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'") || !strings.Contains(csp, "default-src 'none'") ||
		strings.Contains(csp, "script-src") || strings.Contains(csp, "unsafe") {
		t.Fatalf("Content-Security-Policy %q does not allow exactly the page's stylesheet", csp)
	}
	if strings.Contains(body, "<script>") || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") || !strings.Contains(body, "<title>a &lt;title&gt;</title>") {
		t.Fatalf("the page does not escape its data:\n%s", body)
	}
}

// TestRenderFailureIsAPlain500 checks that a template failing half-way
// sends no half page.
func TestRenderFailureIsAPlain500(t *testing.T) {
	p := New("t", `{{define "body"}}<p>first</p>{{.Missing}}{{end}}`, nil, nil)
	rec := httptest.NewRecorder()
	if err := p.Render(rec, 200, "x", 42); err == nil {
		t.Fatal("Render of a failing template = nil error, want one")
	}
	if rec.Code != 500 || strings.Contains(rec.Body.String(), "first") {
		t.Fatalf("a failing template answered %d:\n%s", rec.Code, rec.Body.String())
	}
}
