package tlsconf

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/repool/repool/internal/tlsconf/tlstest"
)

// TestExpiryCollector: the gauge says when the serving certificate and the
// earliest client CA expire, and follows a reload.
func TestExpiryCollector(t *testing.T) {
	p := newPKI(t)
	soon := time.Now().Add(3 * time.Hour).Truncate(time.Second)
	other := tlstest.NewCA(t, "second client CA")
	ca := p.ca.WriteCA(p.dir, "clients.pem")
	if err := appendFile(ca, other.PEM); err != nil {
		t.Fatal(err)
	}
	p.cert, p.key = p.ca.IssueValid("one", time.Now().Add(-time.Hour), soon, "localhost").Write(t, p.dir, "server")
	s, err := NewServer(Files{CertFile: p.cert, KeyFile: p.key, ClientCAFile: ca})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Collector())
	caExp, err := EarliestExpiry("test", append(append([]byte{}, p.ca.PEM...), other.PEM...))
	if err != nil {
		t.Fatal(err)
	}
	want := func(serving time.Time) string {
		return "# HELP " + ExpiryMetric + " " + descHelp(t, reg) + "\n# TYPE " + ExpiryMetric + " gauge\n" +
			ExpiryMetric + `{cert="client_ca"} ` + itoa(caExp.Unix()) + "\n" +
			ExpiryMetric + `{cert="serving"} ` + itoa(serving.Unix()) + "\n"
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want(soon)), ExpiryMetric); err != nil {
		t.Fatal(err)
	}
	later := soon.Add(time.Hour)
	p.ca.IssueValid("one", time.Now().Add(-time.Hour), later, "localhost").Write(t, p.dir, "server")
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want(later)), ExpiryMetric); err != nil {
		t.Fatalf("after a reload: %v", err)
	}
}

// TestEarliestExpiryRefusesNoCertificate: a file without a certificate is
// an error that names it.
func TestEarliestExpiryRefusesNoCertificate(t *testing.T) {
	if _, err := EarliestExpiry("ca.pem", []byte("not a certificate")); err == nil || !strings.Contains(err.Error(), "ca.pem holds no PEM certificate") {
		t.Fatalf("EarliestExpiry(garbage) = %v, want an error naming ca.pem", err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func appendFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// descHelp returns the help text of ExpiryMetric as reg gathers it.
func descHelp(t *testing.T, reg prometheus.Gatherer) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == ExpiryMetric {
			return mf.GetHelp()
		}
	}
	t.Fatalf("%s not gathered", ExpiryMetric)
	return ""
}
