// Command demoimage writes the demo's image (internal/demoimage) into the
// OCI image layout DIR, tagged 1.0, and prints its digest: make demo
// syncs it with byoc build sync oci:DIR:1.0.
package main

import (
	"context"
	"fmt"
	"os"

	"oras.land/oras-go/v2/content/oci"

	"github.com/byoc-dev/byoc/internal/demoimage"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: demoimage DIR")
		os.Exit(2)
	}
	ctx := context.Background()
	st, err := oci.NewWithContext(ctx, os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "demoimage:", err)
		os.Exit(1)
	}
	d, err := demoimage.Write(ctx, st)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demoimage:", err)
		os.Exit(1)
	}
	fmt.Println(d.Digest)
}
