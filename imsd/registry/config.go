package registry

import (
	"fmt"
	"strings"
)

// Config is what a distribution registry (2.8, Debian's docker-registry)
// needs to serve with imsd as its token server.
type Config struct {
	// Addr is the listen address, host:port.
	Addr string
	// RootDir is the storage directory.
	RootDir string
	// Realm is imsd's token endpoint as the registry's clients reach it
	// (http://IMSD/v2/token). Empty: no authentication (an install
	// registry on loopback, or a test's source registry).
	Realm string
	// Service is the aud of the tokens (DefaultService when empty).
	Service string
	// RootCertBundle is the token certificate's path (CertPath).
	RootCertBundle string
}

// YAML writes c as the registry's config.yml.
func (c Config) YAML() []byte {
	svc := c.Service
	if svc == "" {
		svc = DefaultService
	}
	var b strings.Builder
	fmt.Fprintf(&b, "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n")
	fmt.Fprintf(&b, "storage:\n  filesystem:\n    rootdirectory: %q\n  delete:\n    enabled: true\n", c.RootDir)
	fmt.Fprintf(&b, "http:\n  addr: %q\n", c.Addr)
	if c.Realm != "" {
		fmt.Fprintf(&b, "auth:\n  token:\n    realm: %q\n    service: %q\n    issuer: %q\n    rootcertbundle: %q\n",
			c.Realm, svc, Issuer, c.RootCertBundle)
	}
	return []byte(b.String())
}
