package registry

import "fmt"

// AuthYAML is the auth block of a distribution registry's config.yml
// (2.8, Debian's docker-registry) that makes imsd its token server:
// realm is imsd's token endpoint as the registry's clients reach it
// (http://IMSD/v2/token), service the tokens' audience (DefaultService
// when empty), certPath the token certificate (CertPath). It is indented
// to sit under "auth:".
func AuthYAML(realm, service, certPath string) string {
	if service == "" {
		service = DefaultService
	}
	return fmt.Sprintf("  token:\n    realm: %q\n    service: %q\n    issuer: %q\n    rootcertbundle: %q\n", realm, service, Issuer, certPath)
}
