package topology

import "syscall"

// sysProcAttr puts a child in its own process group (a Ctrl-C in the
// terminal reaches only the runner, which stops children in order) and has
// the kernel kill it if the runner dies without cleaning up.
func sysProcAttr(a *syscall.SysProcAttr) *syscall.SysProcAttr {
	if a == nil {
		a = &syscall.SysProcAttr{}
	}
	a.Setpgid = true
	a.Pdeathsig = syscall.SIGKILL
	return a
}
