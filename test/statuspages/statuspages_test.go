// Package statuspages loads the server's and the sidecar's status pages in
// headless Chromium against the real binaries under load, and checks what
// a person sees: the quarantined resource listed as quarantined with its
// end, the open breaker shown open with its cause, a hostile resource id
// shown as text and never run. Chromium runs with --no-sandbox because the
// test command runs as root, where Chromium's sandbox refuses to start; the
// pages it loads are this test's own, on loopback.
//
// With REPOOL_SCREENSHOTS=DIR the test writes one screenshot per page into
// DIR (docs/img holds the committed ones):
//
//	REPOOL_SCREENSHOTS=$PWD/docs/img go test ./test/statuspages
package statuspages

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/repool/repool/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// tokenField is the sign-in form's token field.
const tokenField = chromedp.CSS(`input[name=token]`)

// hostileID is a resource id a tenant could register to attack the page.
const hostileID = `<script>document.title='pwned'</script><img src=x onerror=alert(1)>`

var (
	keyRE    = regexp.MustCompile(`demo API key:\s+(\S+)`)
	tokenRE  = regexp.MustCompile(`operator token:\s+(\S+)`)
	tenantRE = regexp.MustCompile(`created tenant "([^"]+)"`)
)

// proc is a running binary; the test's end stops it.
type proc struct {
	cmd  *exec.Cmd
	out  *testenv.Output
	done chan struct{}
}

func start(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), out: &testenv.Output{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s = got error %v, want nil", name, err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("===== %s output =====\n%s", name, p.out.String())
		}
	})
	return p
}

func build(t *testing.T, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	if raw, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s = got error %v, want nil:\n%s", pkg, err, raw)
	}
	return out
}

// post sends a JSON body and returns the status and the body.
func post(t *testing.T, url, bearer, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s = got error %v, want an answer", url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// call is one call of the load: it posts a JSON body and returns the
// status (0 if the call failed) and the body. The load ignores failures;
// the checks are on the pages.
func call(url, body string) (int, string) {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// cluster is a server and a sidecar with two providers: default on the
// server, dead on a port where nothing listens.
type cluster struct {
	httpURL, sidecarURL string
	key, token, tenant  string
	server, sidecar     *proc
	defaultURL, deadURL string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	server, sidecar := build(t, "github.com/repool/repool/cmd/server"), build(t, "github.com/repool/repool/cmd/sidecar")
	dir := t.TempDir()
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	c := &cluster{httpURL: "http://" + httpAddr}
	c.server = start(t, "server", server, "run", "--grpc-addr", grpcAddr, "--http-addr", httpAddr,
		"--store", "sqlite:"+filepath.Join(dir, "repool.db"), "--log-level", "warn")
	testenv.Eventually(t, 30*time.Second, "the server to be ready and print its first-start secrets", func() bool {
		resp, err := http.Get(c.httpURL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200 && tokenRE.MatchString(c.server.out.String())
	})
	out := c.server.out.String()
	c.key, c.token, c.tenant = keyRE.FindStringSubmatch(out)[1], tokenRE.FindStringSubmatch(out)[1], tenantRE.FindStringSubmatch(out)[1]

	keyFile := filepath.Join(dir, "demo.key")
	if err := os.WriteFile(keyFile, []byte(c.key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	dead := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)) // nothing listens there
	cfg := fmt.Sprintf("listen: %s\nproviders:\n  default:\n    endpoint: %s\n    api_key_file: %s\n  dead:\n    endpoint: %s\n    api_key_file: %s\n",
		listen, grpcAddr, keyFile, dead, keyFile)
	cfgPath := filepath.Join(dir, "sidecar.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c.sidecar = start(t, "sidecar", sidecar, "--config", cfgPath)
	c.sidecarURL = "http://" + listen
	c.defaultURL, c.deadURL = c.sidecarURL+"/v1/providers/default", c.sidecarURL+"/v1/providers/dead"
	testenv.Eventually(t, 30*time.Second, "the sidecar to answer /healthz", func() bool {
		resp, err := http.Get(c.sidecarURL + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return c
}

// load runs workers that acquire and release leases through the sidecar
// until the test ends: proxy-8 always fails, and every tenth cycle also
// reports a failure of it (so the pool quarantines it however rarely it
// leases it), proxy-7 fails one use in ten, the others succeed. It returns how many
// cycles they completed so far.
func load(t *testing.T, c *cluster, workers int) func() int {
	var (
		mu   sync.Mutex
		done int
	)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for ctx.Err() == nil {
				code, body := call(c.defaultURL+"/acquire", `{"context":"checkout","ttl_seconds":30}`)
				if code != 200 {
					time.Sleep(10 * time.Millisecond) // nothing to lease for now: do not spin
					continue
				}
				var a struct {
					Lease struct {
						LeaseID      string `json:"lease_id"`
						FencingToken string `json:"fencing_token"`
						ResourceID   string `json:"resource_id"`
					}
				}
				if json.Unmarshal([]byte(body), &a) != nil {
					continue
				}
				outcome := "SUCCESS"
				if id := a.Lease.ResourceID; id == "proxy-8" || (id == "proxy-7" && rng.IntN(10) == 0) {
					outcome = "FAILURE"
				}
				call(c.defaultURL+"/leases/"+a.Lease.LeaseID+"/release", `{"fencing_token":"`+a.Lease.FencingToken+`","outcome":"`+outcome+`"}`)
				mu.Lock()
				done++
				report := done%10 == 0
				mu.Unlock()
				if report {
					call(c.defaultURL+"/reports", `{"resource_id":"proxy-8","context":"checkout","outcome":"FAILURE"}`)
					// The backend calls the dead provider too, which
					// keeps its breaker opening again after each probe.
					call(c.deadURL+"/acquire", `{"context":"checkout","ttl_seconds":30}`)
				}
			}
		}()
	}
	return func() int { mu.Lock(); defer mu.Unlock(); return done }
}

// browser starts headless Chromium; the test's end stops it.
func browser(t *testing.T) context.Context {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (scripts/test installs Debian's chromium): %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 900), chromedp.UserDataDir(t.TempDir()))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	// A dialog would be a script the page ran: fail on one.
	ctx, cancelC := chromedp.NewContext(actx, chromedp.WithListener(func(ev any) {
		switch d := ev.(type) {
		case *page.EventJavascriptDialogOpening:
			t.Errorf("the page opened a dialog (a script ran): %q", d.Message)
		case page.EventJavascriptDialogOpening:
			t.Errorf("the page opened a dialog (a script ran): %q", d.Message)
		}
	}))
	t.Cleanup(func() { cancelC(); cancelA() })
	// The first Run starts the browser and must not carry a timeout (it
	// would stop the browser); the steps after it get one.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium = got error %v, want nil", err)
	}
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancelT)
	return ctx
}

// row returns the visible text of the first table row whose first cell's
// first line is cell, or "" if there is none.
func row(t *testing.T, ctx context.Context, cell string) string {
	t.Helper()
	q, _ := json.Marshal(cell)
	js := `(() => { for (const tr of document.querySelectorAll('tr')) { const td = tr.cells[0];
		if (td && td.innerText.trim().split('\n')[0] === ` + string(q) + `) return tr.innerText; } return ""; })()`
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
	if err != nil {
		t.Fatalf("reading the row of %q = got error %v, want nil", cell, err)
	}
	return got
}

// text returns the page's visible text.
func text(t *testing.T, ctx context.Context) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		t.Fatalf("reading the page's text = got error %v, want nil", err)
	}
	return s
}

// screenshot saves the page as name in $REPOOL_SCREENSHOTS (else in a
// temporary directory, to prove it can be taken).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("REPOOL_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatalf("screenshot %s = got error %v, want nil", name, err)
	}
	if !bytes.HasPrefix(buf, []byte("\x89PNG")) {
		t.Fatalf("screenshot %s is not a PNG", name)
	}
	if err := os.WriteFile(filepath.Join(dir, name), buf, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestStatusPagesInChromium(t *testing.T) {
	c := startCluster(t)

	// The tenant's pool: eight proxies and one hostile id.
	var res []string
	for i := 1; i <= 8; i++ {
		res = append(res, fmt.Sprintf(`{"id":"proxy-%d","capacity":2}`, i))
	}
	hostile, _ := json.Marshal(hostileID)
	res = append(res, `{"id":`+string(hostile)+`}`)
	if code, body := post(t, c.defaultURL+"/resources", "", `{"resources":[`+strings.Join(res, ",")+`]}`); code != 200 {
		t.Fatalf("registering = got %d %s, want 200", code, body)
	}
	done := load(t, c, 4)
	testenv.Eventually(t, 30*time.Second, "200 lease cycles through the sidecar", func() bool { return done() >= 200 })

	// An operator quarantines proxy-3; the dead provider's breaker opens.
	if code, body := post(t, c.httpURL+"/api/v1/tenants/"+c.tenant+"/resources/proxy-3/quarantine", c.token,
		`{"seconds":600,"reason":"captcha wall"}`); code != 200 {
		t.Fatalf("quarantining proxy-3 = got %d %s, want 200", code, body)
	}
	testenv.Eventually(t, 30*time.Second, "the pool to quarantine proxy-8", func() bool {
		req, _ := http.NewRequest("GET", c.httpURL+"/api/v1/tenants/"+c.tenant+"/resources/proxy-8", nil)
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(raw), `"quarantine":"blocked"`)
	})
	testenv.Eventually(t, 30*time.Second, "the dead provider's breaker to open", func() bool {
		code, body := call(c.deadURL+"/acquire", `{"context":"checkout","ttl_seconds":30}`)
		return code == 503 && strings.Contains(body, "circuit")
	})

	ctx := browser(t)

	// The server: a page load without a token is the sign-in form.
	if err := chromedp.Do(ctx, chromedp.Navigate(c.httpURL+"/status"), chromedp.WaitVisible(tokenField)); err != nil {
		t.Fatalf("loading /status = got error %v, want the sign-in form", err)
	}
	if s := text(t, ctx); !strings.Contains(s, "Sign in with a control-plane token") {
		t.Fatalf("/status without a token shows:\n%s\nwant the sign-in form", s)
	}
	// A wrong token is refused on the page.
	if err := chromedp.Do(ctx, chromedp.SendKeys(tokenField, "not-a-token"), chromedp.Submit(tokenField),
		chromedp.WaitVisible(chromedp.CSS(`p.bad`))); err != nil {
		t.Fatalf("signing in with a wrong token = got error %v", err)
	}
	if s := text(t, ctx); !strings.Contains(s, "The token is not accepted") {
		t.Fatalf("after a wrong token the page shows:\n%s", s)
	}
	// The operator signs in and sees the overview.
	if err := chromedp.Do(ctx, chromedp.SendKeys(tokenField, c.token), chromedp.Submit(tokenField),
		chromedp.WaitVisible(chromedp.Search(`//h2[text()="Tenants"]`))); err != nil {
		t.Fatalf("signing in = got error %v, want the overview", err)
	}
	if r := row(t, ctx, c.tenant); !strings.Contains(r, "active") {
		t.Fatalf("the overview's row of tenant %s = %q, want it active", c.tenant, r)
	}
	if r := row(t, ctx, "default"); !strings.Contains(r, "a server holds the lock") {
		t.Fatalf("the overview's row of group default = %q, want its leader", r)
	}
	if s := text(t, ctx); !strings.Contains(s, "This server: active") {
		t.Fatalf("the overview shows:\n%s\nwant this server active", s)
	}
	screenshot(t, ctx, "status-server.png")

	// The tenant's pool, through the link, as the cookie allows.
	opened := time.Now()
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.Search(`//a[text()="`+c.tenant+`"]`)), chromedp.WaitVisible(chromedp.Search(`//h2[starts-with(text(),"Resources")]`))); err != nil {
		t.Fatalf("opening the tenant's page = got error %v", err)
	}
	tenantPage := time.Since(opened)
	if r := row(t, ctx, "proxy-3"); !strings.Contains(r, "quarantined until") {
		t.Fatalf("the row of proxy-3 = %q, want it quarantined until a time", r)
	}
	if r := row(t, ctx, "proxy-1"); strings.Contains(r, "quarantined") || !strings.Contains(r, "checkout") {
		t.Fatalf("the row of proxy-1 = %q, want it not quarantined, with its context", r)
	}
	if r := row(t, ctx, "quarantined now"); !strings.Contains(r, "2") {
		t.Fatalf("the count of quarantined resources = %q, want 2 (proxy-3 and proxy-8)", r)
	}
	if r := row(t, ctx, "proxy-8"); !strings.Contains(r, "quarantined") {
		t.Fatalf("the row of proxy-8, which always fails = %q, want it quarantined by the pool", r)
	}
	// Worst first, as shown: the two quarantined, then the others by their
	// long-run success, lowest first.
	listed, err := chromedp.Run(ctx, chromedp.Evaluate[[][]string](`Array.from(document.querySelectorAll('table')[1].rows).slice(1).map(r => [r.cells[0].innerText.trim(), r.cells[4].innerText.trim()])`))
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	var rates []float64
	for _, l := range listed {
		var pct float64
		if len(l) != 2 {
			t.Fatalf("a resource row of the tenant's page = %q, want its id and its long-run success", l)
		}
		if _, err := fmt.Sscanf(l[1], "%f %%", &pct); err != nil {
			t.Fatalf("the long-run success of %s = %q, want a percentage", l[0], l[1])
		}
		order, rates = append(order, l[0]), append(rates, pct)
	}
	if len(order) != 9 || slices.Index(order, "proxy-3") > 1 || slices.Index(order, "proxy-8") > 1 || !slices.IsSorted(rates[2:]) {
		t.Fatalf("the resources listed in order %q with long-run success %v, want the quarantined proxy-3 and proxy-8 first, then the others by success, lowest first", order, rates)
	}
	// The hostile id is text, not markup: no script element, the title
	// unchanged, no dialog (the listener above).
	if r := row(t, ctx, hostileID); r == "" {
		t.Fatalf("the hostile id is not shown as text on the tenant's page:\n%s", text(t, ctx))
	}
	scripts, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.scripts.length + document.images.length`))
	if err != nil {
		t.Fatal(err)
	}
	title, err := chromedp.Run(ctx, chromedp.Title())
	if err != nil {
		t.Fatal(err)
	}
	if scripts != 0 || title == "pwned" {
		t.Fatalf("the hostile id became markup: %d scripts and images, title %q", scripts, title)
	}
	screenshot(t, ctx, "status-tenant.png")

	// The sidecar's page: the dead provider's breaker open with its cause.
	// Its breaker is open, then half-open for the probe after each open
	// timeout, then open again: a person reloads until it shows open.
	var dead string
	testenv.Eventually(t, 30*time.Second, "the sidecar's page to show the dead provider's breaker open", func() bool {
		if err := chromedp.Do(ctx, chromedp.Navigate(c.sidecarURL+"/status"), chromedp.WaitVisible(chromedp.Search(`//h1[text()="repool sidecar status"]`))); err != nil {
			t.Fatalf("loading the sidecar's page = got error %v", err)
		}
		dead = row(t, ctx, "dead")
		return strings.HasPrefix(dead, "dead\topen")
	})
	if !strings.Contains(dead, "nothing is listening") {
		t.Fatalf("the sidecar's row of provider dead = %q, want its breaker open with the cause (nothing is listening)", dead)
	}
	if !regexp.MustCompile(`\d+\.\d %`).MatchString(dead) {
		t.Fatalf("the sidecar's row of provider dead = %q, want a fast-fail rate", dead)
	}
	def := row(t, ctx, "default")
	if !strings.Contains(def, "closed") || !strings.Contains(def, "valid until") {
		t.Fatalf("the sidecar's row of provider default = %q, want its breaker closed and a valid token", def)
	}
	screenshot(t, ctx, "status-sidecar.png")
	// Figures for a person to compare, not a target: the time from the
	// click to the tenant's page shown, under the load above.
	t.Logf("measure: statuspages_tenant_page_ms=%d", tenantPage.Milliseconds())
	t.Logf("measure: statuspages_load_cycles=%d", done())
}

// TestStatusPagesRefuseOtherSites checks the pages' headers and that
// neither page can be driven from another site.
func TestStatusPagesRefuseOtherSites(t *testing.T) {
	c := startCluster(t)
	get := func(url string, header map[string]string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for _, url := range []string{c.httpURL + "/status", c.sidecarURL + "/status"} {
		resp := get(url, map[string]string{"Authorization": "Bearer " + c.token})
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s = %d, want 200", url, resp.StatusCode)
		}
		h := resp.Header
		csp := h.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "script-src") ||
			h.Get("X-Frame-Options") != "DENY" || h.Get("Access-Control-Allow-Origin") != "" || h.Get("Cache-Control") != "no-store" {
			t.Fatalf("GET %s headers = %v, want a CSP without scripts, no framing, no CORS, no caching", url, h)
		}
	}
	// The sidecar's guard refuses the page to another site, as every route.
	for _, hdr := range []map[string]string{{"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}, {"Host": "evil.example"}} {
		req, _ := http.NewRequest("GET", c.sidecarURL+"/status", nil)
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 {
			t.Fatalf("GET sidecar /status with %v = %d, want 403", hdr, resp.StatusCode)
		}
	}
	// The server's sign-in refuses a form posted by another site, and sets
	// no cookie; from its own page it sets an HttpOnly, SameSite=Strict one.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	login := func(origin string) *http.Response {
		req, _ := http.NewRequest("POST", c.httpURL+"/status/login", strings.NewReader("token="+c.token))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := login("http://evil.example"); resp.StatusCode != 403 || len(resp.Cookies()) != 0 {
		t.Fatalf("a sign-in posted from another site = %d with cookies %v, want 403 and none", resp.StatusCode, resp.Cookies())
	}
	resp := login(c.httpURL)
	ck := resp.Cookies()
	if resp.StatusCode != 303 || len(ck) != 1 || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode || ck[0].Path != "/status" {
		t.Fatalf("a sign-in from the page = %d with cookies %v, want 303 and one HttpOnly SameSite=Strict cookie for /status", resp.StatusCode, ck)
	}
	// The cookie opens the pages, never the JSON API.
	req, _ := http.NewRequest("GET", c.httpURL+"/api/v1/tenants", nil)
	req.AddCookie(ck[0])
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != 401 {
		t.Fatalf("GET /api/v1/tenants with the page's cookie = %d, want 401", r2.StatusCode)
	}
}
