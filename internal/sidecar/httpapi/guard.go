package httpapi

import (
	"mime"
	"net"
	"net/http"
	"strings"
)

// Error codes of the guard's refusals.
const (
	codeForbiddenHost        = "forbidden_host"
	codeForbiddenOrigin      = "forbidden_origin"
	codeUnsupportedMediaType = "unsupported_media_type"
)

// guard refuses, before any route, the requests that only a web page could
// have made. Localhost is not a boundary against a browser: a page from
// anywhere can send "simple" requests (GET, and POST with a text/plain,
// form or multipart body) to 127.0.0.1, and DNS rebinding lets it read the
// answers under its own host name. So:
//
//  1. Host must be a loopback name or address, the listen host or an
//     allowed host (403 forbidden_host): a rebound name is none of them.
//  2. A request with an Origin header, or one a browser marks cross-site
//     or same-site with Sec-Fetch-Site, is refused unless its origin is
//     allowed (403 forbidden_origin). Backends send neither.
//  3. A request with a body, and every POST, PUT and PATCH, must say
//     Content-Type: application/json (415 unsupported_media_type): no
//     browser sends that across sites without a CORS preflight, which rule
//     2 refuses. GET and DELETE without a body need no Content-Type.
type guard struct {
	hosts   map[string]bool // lower case, without a trailing dot
	origins map[string]bool // canonical, as config.ParseOrigin
}

func newGuard(hosts, origins []string) guard {
	g := guard{hosts: map[string]bool{}, origins: map[string]bool{}}
	for _, h := range hosts {
		g.hosts[canonicalHost(h)] = true
	}
	for _, o := range origins {
		g.origins[strings.ToLower(o)] = true
	}
	return g
}

// canonicalHost is a Host header's host in lower case, without the port,
// the brackets of an IPv6 address or a trailing dot.
func canonicalHost(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// check returns the refusal of r, or ok.
func (g guard) check(r *http.Request) (answer, bool) {
	if !g.hostAllowed(r.Host) {
		return answer{status: http.StatusForbidden, code: codeForbiddenHost, msg: "Host " + jsonQuote(r.Host) +
			" is not a loopback name or address, the sidecar's listen host or one of allowed_hosts: the sidecar refuses requests addressed to another name (DNS rebinding)"}, false
	}
	origins := r.Header.Values("Origin")
	for _, o := range origins {
		if !g.origins[strings.ToLower(o)] {
			return answer{status: http.StatusForbidden, code: codeForbiddenOrigin, msg: "Origin " + jsonQuote(o) +
				" is not one of allowed_origins: the sidecar refuses requests from web pages"}, false
		}
	}
	if site := r.Header.Get("Sec-Fetch-Site"); len(origins) == 0 && (site == "cross-site" || site == "same-site") {
		return answer{status: http.StatusForbidden, code: codeForbiddenOrigin, msg: "Sec-Fetch-Site " + jsonQuote(site) +
			": the sidecar refuses requests that a browser sends from another site"}, false
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" && needsJSON(r) { // the usual header as is, without parsing
		mt, params, err := mime.ParseMediaType(ct)
		cs, hasCS := params["charset"]
		if err != nil || mt != "application/json" || (hasCS && !strings.EqualFold(cs, "utf-8")) || len(params) > 1 || (len(params) == 1 && !hasCS) {
			if ct == "" {
				ct = "none"
			} else {
				ct = jsonQuote(ct)
			}
			return answer{status: http.StatusUnsupportedMediaType, code: codeUnsupportedMediaType, msg: "Content-Type " + ct +
				": want application/json (request bodies are JSON; every POST needs this header)"}, false
		}
	}
	return answer{}, true
}

// hostAllowed reports whether a Host header names the sidecar: a loopback
// name or address, or an allowed host.
func (g guard) hostAllowed(hostport string) bool {
	h := canonicalHost(hostport)
	if h == "localhost" || g.hosts[h] {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// needsJSON reports whether r must carry Content-Type: application/json:
// every POST, PUT and PATCH (they take JSON bodies), and any request with a
// body.
func needsJSON(r *http.Request) bool {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		return true
	}
	return r.ContentLength != 0
}
