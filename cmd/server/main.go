// Command server runs the repool reputation pool server.
//
//	server [run] [flags]          serve (gRPC data plane, HTTP control plane)
//	server admin-token [flags]    print a control-plane bearer token
//	server backup --to FILE       copy a SQLite store while it serves
//	server restore --from FILE    make a backup the (stopped) store's database
//	server haproxy ...            render haproxy.cfg; status/drain/ready/maint of a server
//	server keepalived ...         render keepalived.conf; check, its track script
//	server status --inventory F   the deployment at a glance (LB hosts, servers, leaders)
//	server version                the build (also --version)
//	server help [COMMAND]         the commands, or a command's flags
//
// Every command takes -h; see internal/servercmd.
package main

import (
	"context"
	"os"

	"github.com/repool/repool/internal/cli"
	"github.com/repool/repool/internal/servercmd"
)

func main() {
	os.Exit(cli.Main(servercmd.Prog, os.Stderr, func(ctx context.Context) error {
		return servercmd.Run(ctx, os.Args[1:], servercmd.Env{Getenv: os.Getenv, Stdout: os.Stdout, Stderr: os.Stderr})
	}))
}
