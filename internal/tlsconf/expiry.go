package tlsconf

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ExpiryMetric is the gauge of when a certificate in use expires, in
// seconds since the Unix epoch; its label cert says which one. Servers and
// sidecars export it under this one name, so that one alert covers both.
const ExpiryMetric = "repool_tls_cert_expiry_timestamp_seconds"

// Values of ExpiryMetric's cert label.
const (
	CertServing  = "serving"   // a server's own certificate (the leaf)
	CertClientCA = "client_ca" // the CA that clients' certificates must be signed by
	CertClient   = "client"    // a client's own certificate (mutual TLS)
	CertCA       = "ca"        // the CA that a server's certificate must be signed by
)

// EarliestExpiry returns the earliest NotAfter of the PEM certificates in
// raw; name says where they came from, for errors.
func EarliestExpiry(name string, raw []byte) (time.Time, error) {
	var first time.Time
	for {
		var b *pem.Block
		b, raw = pem.Decode(raw)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return time.Time{}, fmt.Errorf("tls: %s: %w", name, err)
		}
		if first.IsZero() || c.NotAfter.Before(first) {
			first = c.NotAfter
		}
	}
	if first.IsZero() {
		return time.Time{}, fmt.Errorf("tls: %s holds no PEM certificate", name)
	}
	return first, nil
}

// earliestExpiryFile is EarliestExpiry of a file.
func earliestExpiryFile(path string) (time.Time, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, fmt.Errorf("tls: CA file: %w", err)
	}
	return EarliestExpiry(path, raw)
}

var descExpiry = prometheus.NewDesc(ExpiryMetric,
	"When the certificate in use expires, in seconds since the Unix epoch (cert: serving, the server's own; client_ca, the earliest of the CAs that clients' certificates are checked against).",
	[]string{"cert"}, nil)

// Collector returns a collector of ExpiryMetric for the material in use
// at each scrape (a reload shows at the next one): cert="serving", and
// cert="client_ca" when clients' certificates are checked.
func (s *Server) Collector() prometheus.Collector { return expiryCollector{s} }

type expiryCollector struct{ s *Server }

func (c expiryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descExpiry }

func (c expiryCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.s.cur.Load()
	ch <- prometheus.MustNewConstMetric(descExpiry, prometheus.GaugeValue, unixSeconds(m.notAfter), CertServing)
	if m.clients != nil {
		ch <- prometheus.MustNewConstMetric(descExpiry, prometheus.GaugeValue, unixSeconds(m.caNotAfter), CertClientCA)
	}
}

func unixSeconds(t time.Time) float64 { return float64(t.Unix()) }
