// Package cli is what repool's commands (cmd/server and its subcommands,
// cmd/sidecar) share on the command line: help that is asked for goes to
// standard output and ends the command with status 0, and a bad flag shows
// the command's usage on standard error.
package cli

import (
	"bytes"
	"errors"
	"flag"
	"io"
)

// IsHelp reports whether arg asks for help as a flag: -h, --h, -help or
// --help.
func IsHelp(arg string) bool {
	switch arg {
	case "-h", "--h", "-help", "--help":
		return true
	}
	return false
}

// IsVersion reports whether arg asks for the build's version as a flag:
// -version or --version.
func IsVersion(arg string) bool { return arg == "-version" || arg == "--version" }

// Parse runs parse, which parses fs (itself, or through a loader such as
// servercmd.Load), and routes what fs prints. After -h or --help it prints
// fs.Usage to stdout and returns flag.ErrHelp, which a main turns into exit
// status 0. After a flag that fs refused it prints fs.Usage to stderr and
// returns the refusal, for the main to print last. Other errors of parse
// (a configuration file that does not parse, say) are returned as they are,
// without the usage. fs.Usage must write to fs.Output(), as flag's default
// does; fs's output is stderr afterwards.
func Parse(fs *flag.FlagSet, stdout, stderr io.Writer, parse func() error) error {
	// fs writes only when it refuses a flag or is asked for help: what it
	// writes tells a flag error from the other errors of parse. Its own
	// copy of the error is dropped; the caller prints the returned one.
	var said bytes.Buffer
	fs.SetOutput(&said)
	err := parse()
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
	case err != nil && said.Len() > 0:
		fs.SetOutput(stderr)
		fs.Usage()
	}
	fs.SetOutput(stderr)
	return err
}

// Usage returns a flag.FlagSet Usage function that prints text (the
// synopsis and what the command does, ending in a newline) and then, under
// "flags:", every flag of fs with its default.
func Usage(fs *flag.FlagSet, text string) func() {
	return func() {
		w := fs.Output()
		io.WriteString(w, text)
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			io.WriteString(w, "\nflags:\n")
			fs.PrintDefaults()
		}
	}
}
