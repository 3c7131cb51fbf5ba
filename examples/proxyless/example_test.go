package main

import (
	"context"
	"fmt"
	"io"
	"os"
)

// Example runs the whole demo: traffic through xds:///greeter moves from
// backend-1 to backend-2 after one endpoint push.
func Example() {
	if err := run(context.Background(), nil, os.Stdout, io.Discard); err != nil {
		fmt.Println(err)
	}
	// Output:
	// backend-1 and backend-2 serve grpc.testing.TestService on loopback
	// control plane: ADS on loopback; greeter-endpoints = [backend-1]
	// client: dialing xds:///greeter
	// client: UnaryCall 1 answered by backend-1
	// client: UnaryCall 2 answered by backend-1
	// client: UnaryCall 3 answered by backend-1
	// control plane: proxyless-client ACKed CDS, EDS, LDS, RDS
	// control plane: greeter-endpoints = [backend-2]
	// control plane: the Store pushes Full=false ConfigsUpdated=[EDS greeter-endpoints] Reason=endpoint:1
	// control plane: pushed 1 EDS response; proxyless-client ACKed it
	// client: traffic reached backend-2
	// client: UnaryCall 1 answered by backend-2
	// client: UnaryCall 2 answered by backend-2
	// client: UnaryCall 3 answered by backend-2
	// client, control plane and backends stopped
}
