// Command etcd is etcd's own server entry point, built from the published server module.
//
// etcd's repository main (server/main.go) cannot be installed with `go install` because the
// server module replaces its siblings with relative paths; a main of our own that calls the
// same entry builds from the module proxy.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
