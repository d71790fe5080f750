//go:build !linux

package topology

import "syscall"

// sysProcAttr puts a child in its own process group. Without Linux's
// parent-death signal, children of a runner that is killed outright
// survive it.
func sysProcAttr(a *syscall.SysProcAttr) *syscall.SysProcAttr {
	if a == nil {
		a = &syscall.SysProcAttr{}
	}
	a.Setpgid = true
	return a
}
