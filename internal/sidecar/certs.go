package sidecar

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/repool/repool/internal/tlsconf"
)

var descCertExpiry = prometheus.NewDesc(tlsconf.ExpiryMetric,
	"When a provider's TLS certificate in use expires, in seconds since the Unix epoch (cert: client, its client certificate; ca, the earliest of the CAs its endpoint's certificate is checked against).",
	[]string{"provider", "cert"}, nil)

// certExpiry exports tlsconf.ExpiryMetric for the TLS files of every
// provider in the configuration in effect (a reload shows at the next
// scrape): a series per file set, none for a provider without TLS files.
type certExpiry struct{ s *Sidecar }

func (c certExpiry) Describe(ch chan<- *prometheus.Desc) { ch <- descCertExpiry }

func (c certExpiry) Collect(ch chan<- prometheus.Metric) {
	for name, e := range *c.s.set.Load() {
		for _, f := range []struct{ cert, pem string }{{tlsconf.CertClient, e.cfg.TLS.Cert}, {tlsconf.CertCA, e.cfg.TLS.CA}} {
			if f.pem == "" {
				continue
			}
			// Load checked the files; one that does not parse here is
			// left out rather than reported as expired.
			if t, err := tlsconf.EarliestExpiry(name+" "+f.cert, []byte(f.pem)); err == nil {
				ch <- prometheus.MustNewConstMetric(descCertExpiry, prometheus.GaugeValue, float64(t.Unix()), name, f.cert)
			}
		}
	}
}
