package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Main runs a command as a main does: run gets a context that SIGINT or
// SIGTERM cancels, and Main returns the process's exit status: 0 when run
// succeeds or help was asked for (flag.ErrHelp), else 1 after printing
// "prog: error" to stderr.
func Main(prog string, stderr io.Writer, run func(ctx context.Context) error) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return exitStatus(prog, stderr, run(ctx))
}

// exitStatus is Main's status for err.
func exitStatus(prog string, stderr io.Writer, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(stderr, prog+":", err)
	return 1
}
