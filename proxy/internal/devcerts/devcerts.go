// Package devcerts makes throwaway certificates for mutual TLS between the
// proxy and its daemons, for tests and development stacks: a fresh CA, a
// server certificate for the daemons' addresses and a client certificate for
// the proxy, written as PEM files in the shapes LSP_DAEMON_TLS_* expect.
// Nothing here is built into a binary, and every call makes new keys.
package devcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Files are the PEM files of one CA and its two leaves.
type Files struct {
	CA         string // the CA certificate: the daemon's LSP_DAEMON_TLS_CLIENT_CA, the proxy's LSP_DAEMON_TLS_CA
	ServerCert string // the daemon's LSP_DAEMON_TLS_CERT
	ServerKey  string // the daemon's LSP_DAEMON_TLS_KEY
	ClientCert string // the proxy's LSP_DAEMON_TLS_CERT
	ClientKey  string // the proxy's LSP_DAEMON_TLS_KEY
}

// Generate writes a CA, a server certificate valid for hosts (IP addresses
// or DNS names) and a client certificate into dir, keys with mode 0600, all
// valid for a day. name prefixes the files, so several sets can share dir.
func Generate(dir, name string, hosts ...string) (*Files, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("devcerts: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name + " dev CA"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("devcerts: CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("devcerts: CA: %w", err)
	}
	f := &Files{
		CA:         filepath.Join(dir, name+"-ca.pem"),
		ServerCert: filepath.Join(dir, name+"-server.pem"),
		ServerKey:  filepath.Join(dir, name+"-server.key"),
		ClientCert: filepath.Join(dir, name+"-client.pem"),
		ClientKey:  filepath.Join(dir, name+"-client.key"),
	}
	if err := writePEM(f.CA, "CERTIFICATE", caDER, 0o644); err != nil {
		return nil, err
	}
	server := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name + " daemon"},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			server.IPAddresses = append(server.IPAddresses, ip)
		} else {
			server.DNSNames = append(server.DNSNames, h)
		}
	}
	if err := leaf(server, ca, caKey, f.ServerCert, f.ServerKey); err != nil {
		return nil, err
	}
	client := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name + " proxy"},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := leaf(client, ca, caKey, f.ClientCert, f.ClientKey); err != nil {
		return nil, err
	}
	return f, nil
}

func leaf(tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey, certPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("devcerts: %w", err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("devcerts: %s: %w", tmpl.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("devcerts: %w", err)
	}
	if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	return writePEM(keyPath, "PRIVATE KEY", keyDER, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		return fmt.Errorf("devcerts: %w", err)
	}
	return nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}
