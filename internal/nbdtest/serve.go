package nbdtest

import (
	"context"
	"net"

	"github.com/difctl/difctl/blockdev/nbd"
)

// Start serves exports with opts on a listener of network, addr until
// stop, which returns what Serve returned.
func Start(exports []nbd.Export, opts nbd.Options, network, addr string) (stop func() error, err error) {
	srv, err := nbd.NewServer(exports, opts)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	return func() error {
		cancel()
		return <-done
	}, nil
}
