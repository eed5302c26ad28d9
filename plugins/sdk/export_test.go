package sdk

import "google.golang.org/grpc"

// ServeForTest builds the server Serve would, for a host keeping its
// lease in the file at leasePath ("": none), and returns it with the
// function that ends the lease's watch.
func ServeForTest(p Plugin, leasePath string) (*grpc.Server, func(), error) {
	gp, newServer, stop := serving(p, nil, leasePath)
	gp.stdioSync = false // the test's stdout is no go-plugin stream
	srv := newServer(nil)
	if err := gp.GRPCServer(nil, srv); err != nil {
		stop()
		return nil, nil, err
	}
	return srv, stop, nil
}
